"""RMSNorm in TileLang: the expert version.

Key ideas (memory-bound: the floor is one read of x, one write of y; w is 8-32 KB and stays in L2):
- One fused kernel, one CTA per row: eager PyTorch runs ~6 kernels (upcast, square, mean, rsqrt, two
  multiplies, downcast) with fp32 temporaries in between; here x is read from DRAM once and y written once.
- The row lives in registers (a fragment of N fp32 values spread over the CTA's threads): read once, squared
  and summed (tl::AllReduce: warp shuffles, then shared memory across warps), then scaled and stored.
- 16-byte vector accesses: N is a compile-time constant and the fragment is padded to a multiple of
  THREADS * VEC (VEC = 8 bf16/fp16 values), so TileLang maps thread t to vectors t, t + THREADS, ... and
  emits 128-bit loads and stores (`uint4`), coalesced across the warp; the padding's guard (j < N) is
  uniform over each vector when N % VEC == 0. Other N (odd sizes) get scalar accesses.
- Kernels compiled once per (dtype, N) and cached; the row count M is dynamic (a run-time argument).
"""

import tilelang
import tilelang.language as T
import torch

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
_compiled: dict[tuple, object] = {}


def _plan(n: int, itemsize: int) -> tuple[int, int]:
    """(vector width, threads per CTA): 16-byte vectors when N allows, about 4 of them per thread."""
    vec = 16 // itemsize
    while n % vec:
        vec //= 2
    threads = 32
    while threads < 256 and threads * vec * 4 < n:
        threads *= 2
    return vec, threads


def _rmsnorm(N: int, dtype: str, vec: int, threads: int):
    M = T.dynamic("M")
    NP = -(-N // (threads * vec)) * threads * vec  # padded to whole vectors of every thread

    @T.prim_func
    def rmsnorm(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype),
                eps: T.float32):
        with T.Kernel(M, threads=threads) as row:
            xs = T.alloc_fragment((NP,), "float32")
            sq = T.alloc_fragment((NP,), "float32")
            total = T.alloc_fragment((1,), "float32")
            for j in T.Parallel(NP):
                xs[j] = T.if_then_else(j < N, T.cast(X[row, j], "float32"), T.float32(0))
            for j in T.Parallel(NP):
                sq[j] = xs[j] * xs[j]
            T.reduce_sum(sq, total, dim=0)
            for j in T.Parallel(NP):
                if j < N:
                    Y[row, j] = T.cast(xs[j] * T.rsqrt(total[0] / N + eps) * T.cast(W[j], "float32"), dtype)

    return rmsnorm


def compile_kernels(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, *, eps: float):
    """The compiled kernel for this dtype and row length (compiled on first use, then cached)."""
    n = x.shape[-1]
    key = (x.dtype, n)
    if key not in _compiled:
        vec, threads = _plan(n, x.element_size())
        _compiled[key] = tilelang.compile(_rmsnorm(n, _DTYPES[x.dtype], vec, threads))
    return _compiled[key]


def entry(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, *, eps: float) -> None:
    """y[m, :] = x[m, :] * rsqrt(mean(x[m, :]^2) + eps) * w, x and y [M, N], w [N]; returns None."""
    if x.shape[0] == 0:
        return
    compile_kernels(x, w, y, eps=eps)(x, w, y, eps)
