"""Rotary position embedding (NeoX / Llama style) in TileLang: the expert version.

Key ideas (memory-bound: the floor is one read of x [T, H, D] and one write of y, plus cos/sin [T, D/2]):
- One fused kernel: eager PyTorch slices, multiplies, negates and concatenates with fp32 temporaries
  (~10 kernels); here x is read once and y written once, each pair (x1, x2) = (x[j], x[j + D/2]) rotated in
  fp32 registers and rounded once.
- Grid (T, H / HB): one token per row of CTAs (T first: grid.x takes up to 2^31 - 1), HB heads of that token
  per CTA, so cos/sin of the token are read once per CTA (from L1/L2 for the other heads).
- H and D are compile-time constants: TileLang proves x's halves, y's and cos/sin's rows aligned and emits
  vector loads and stores, coalesced across the warp (TileLang 0.1.15 lays this loop out as 8-byte vectors,
  `uint2`, two per thread, where D/2 % 4 == 0; 16-byte ones would need a layout of its own). Heads past H
  (the last CTA of a ragged H) are guarded per vector.
"""

import tilelang
import tilelang.language as T
import torch

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
_compiled: dict[tuple, object] = {}


def _plan(half: int, itemsize: int) -> tuple[int, int, int]:
    """(vector width, heads per CTA, threads): 16-byte vectors when D/2 allows, about 128 threads."""
    vec = 16 // itemsize
    while half % vec:
        vec //= 2
    lanes = half // vec
    heads = max(1, 128 // lanes)
    return vec, heads, heads * lanes


def _rope(H: int, D: int, dtype: str, heads: int, threads: int):
    Tn = T.dynamic("T")
    HALF = D // 2

    @T.prim_func
    def rope(X: T.Tensor((Tn, H, D), dtype), C: T.Tensor((Tn, HALF), dtype), S: T.Tensor((Tn, HALF), dtype),
             Y: T.Tensor((Tn, H, D), dtype)):
        with T.Kernel(Tn, T.ceildiv(H, heads), threads=threads) as (t, bh):
            for i, j in T.Parallel(heads, HALF):
                if bh * heads + i < H:
                    c = T.cast(C[t, j], "float32")
                    s = T.cast(S[t, j], "float32")
                    x1 = T.cast(X[t, bh * heads + i, j], "float32")
                    x2 = T.cast(X[t, bh * heads + i, j + HALF], "float32")
                    Y[t, bh * heads + i, j] = T.cast(x1 * c - x2 * s, dtype)
                    Y[t, bh * heads + i, j + HALF] = T.cast(x2 * c + x1 * s, dtype)

    return rope


def compile_kernels(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor):
    """The compiled kernel for this dtype, head count and head size (compiled on first use, then cached)."""
    _, h, d = x.shape
    key = (x.dtype, h, d)
    if key not in _compiled:
        _, heads, threads = _plan(d // 2, x.element_size())
        _compiled[key] = tilelang.compile(_rope(h, d, _DTYPES[x.dtype], heads, threads))
    return _compiled[key]


def entry(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor) -> None:
    """y = x * cos + rotate_half(x) * sin per head, x and y [T, H, D], cos and sin [T, D/2]; returns None."""
    if x.shape[0] == 0:
        return
    compile_kernels(x, cos, sin, y)(x, cos, sin, y)
