"""Residual add + RMSNorm in TileLang: a correct, deliberately slow start. Make it fast.

    s = x + residual (fp32),  residual_out = s,  y[m, :] = s[m, :] * rsqrt(mean(s[m, :]^2) + eps) * w

How a TileLang module is called here (tasks/README.md, "TileLang"):
- `compile_kernels(x, residual, w, y, residual_out, *, eps)` compiles (`tilelang.compile`, no target: the environment picks it) every
  kernel `entry` launches, for the shapes and dtypes of its arguments, and caches them. It reads nothing of
  the tensors but shapes, strides and dtypes (the compile check calls it with fake tensors, without a GPU).
- `entry(x, residual, w, y, residual_out, *, eps)` gets the compiled kernel through it and calls it with the tensors (and scalars):
  TileLang launches it on PyTorch's current stream.

This version: one thread per row, scalar loads, both sizes dynamic (one kernel per dtype).
"""

import tilelang
import tilelang.language as T
import torch

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
_compiled: dict[tuple, object] = {}


def _fused_add_rmsnorm(dtype: str):
    M, N = T.dynamic("M"), T.dynamic("N")

    @T.prim_func
    def fused_add_rmsnorm(X: T.Tensor((M, N), dtype), R: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype),
                          Y: T.Tensor((M, N), dtype), RO: T.Tensor((M, N), dtype), eps: T.float32):
        with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
            tx = T.get_thread_binding()
            acc = T.alloc_local((1,), "float32")
            row = bx * 32 + tx
            if row < M:
                acc[0] = 0.0
                for j in T.serial(N):
                    v = T.cast(X[row, j], "float32") + T.cast(R[row, j], "float32")
                    acc[0] += v * v
                acc[0] = T.rsqrt(acc[0] / T.cast(N, "float32") + eps)
                for j in T.serial(N):
                    v = T.cast(X[row, j], "float32") + T.cast(R[row, j], "float32")
                    RO[row, j] = T.cast(v, dtype)
                    Y[row, j] = T.cast(v * acc[0] * T.cast(W[j], "float32"), dtype)

    return fused_add_rmsnorm


def compile_kernels(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, y: torch.Tensor,
                    residual_out: torch.Tensor, *, eps: float):
    """The compiled kernel for this dtype (sizes are run-time arguments), compiled once."""
    key = (x.dtype,)
    if key not in _compiled:
        _compiled[key] = tilelang.compile(_fused_add_rmsnorm(_DTYPES[x.dtype]))
    return _compiled[key]


def entry(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, y: torch.Tensor, residual_out: torch.Tensor,
          *, eps: float) -> None:
    """Write x + residual into residual_out and RMSNorm(x + residual) * w into y; return None."""
    if x.shape[0] == 0:
        return
    compile_kernels(x, residual, w, y, residual_out, eps=eps)(x, residual, w, y, residual_out, eps)
