"""Rotary position embedding (NeoX style) in the CuTe DSL: the expert version.

Key ideas (memory-bound: the floor is one read of x and of cos/sin, one write of y):
- One kernel: eager PyTorch slices, multiplies, subtracts, adds and concatenates through fp32 temporaries
  (about ten kernels); here each element of x is read once and each of y written once.
- 16-byte vectors: x and y viewed as [T, H, 2, D/2 / VEC, VEC] (the two halves of each head), cos and sin as
  [T, D/2 / VEC, VEC], with H and D compile-time constants and pointers declared 16-byte aligned. A thread
  takes one vector of each half of one head (128-bit loads of x1, x2, cos, sin; two 128-bit stores) and
  ITEMS such vectors a block-width apart; consecutive threads take consecutive vectors (coalesced). The
  cos/sin rows are shared by the H heads of a token, so after the first head they come from L1/L2.
- Math in fp32, one rounding to the output dtype. Compiled once per (dtype, H, D, vector width).
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import make_ptr

_DTYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
_THREADS = 256
_ITEMS = 4
_compiled: dict[tuple, object] = {}


@cute.kernel
def _rope_vectors(mX: cute.Tensor, mC: cute.Tensor, mS: cute.Tensor, mY: cute.Tensor, total: cutlass.Int32,
                  H: cutlass.Constexpr, HV: cutlass.Constexpr):
    tid, _, _ = cute.arch.thread_idx()
    bid, _, _ = cute.arch.block_idx()
    for i in cutlass.range_constexpr(_ITEMS):
        idx = (bid * _ITEMS + i) * _THREADS + tid
        if idx < total:
            t = idx // (H * HV)
            h = (idx // HV) % H
            j = idx % HV
            x1 = mX[t, h, 0, j, None].load().to(cutlass.Float32)
            x2 = mX[t, h, 1, j, None].load().to(cutlass.Float32)
            c = mC[t, j, None].load().to(cutlass.Float32)
            s = mS[t, j, None].load().to(cutlass.Float32)
            mY[t, h, 0, j, None].store((x1 * c - x2 * s).to(mY.element_type))
            mY[t, h, 1, j, None].store((x2 * c + x1 * s).to(mY.element_type))


@cute.jit
def _rope(px: cute.Pointer, pc: cute.Pointer, ps: cute.Pointer, py: cute.Pointer, tokens: cutlass.Int32,
          stream: cuda.CUstream, H: cutlass.Constexpr, D: cutlass.Constexpr, VEC: cutlass.Constexpr):
    half = D // 2
    hv = half // VEC
    heads = cute.make_layout((tokens, H, 2, hv, VEC), stride=(H * D, D, half, VEC, 1))
    table = cute.make_layout((tokens, hv, VEC), stride=(half, VEC, 1))
    total = tokens * H * hv
    per_block = _THREADS * _ITEMS
    _rope_vectors(cute.make_tensor(px, heads), cute.make_tensor(pc, table), cute.make_tensor(ps, table),
                  cute.make_tensor(py, heads), total, H, hv).launch(
        grid=((total + per_block - 1) // per_block, 1, 1), block=(_THREADS, 1, 1), stream=stream)


def compile_kernels(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor, vec: int | None = None):
    """The compiled kernel for these shapes and dtypes (compiled on first use, then cached)."""
    heads, d = x.shape[1], x.shape[2]
    if vec is None:
        vec = 16 // x.element_size()
        while (d // 2) % vec:
            vec //= 2
    key = (x.dtype, heads, d, vec)
    if key not in _compiled:
        def ptr():
            return make_ptr(_DTYPES[x.dtype], 0, cute.AddressSpace.gmem, assumed_align=vec * x.element_size())
        _compiled[key] = cute.compile(_rope, ptr(), ptr(), ptr(), ptr(), cutlass.Int32(1), cuda.CUstream(0),
                                      heads, d, vec)
    return _compiled[key], vec


def entry(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor) -> None:
    """y = x * cos + rotate_half(x) * sin per head, x and y [T, H, D], cos and sin [T, D/2]; returns None."""
    tokens = x.shape[0]
    if tokens == 0 or x.numel() == 0:
        return
    tensors = (x, cos, sin, y)
    aligned = all(t.data_ptr() % 16 == 0 for t in tensors)
    kernel, vec = compile_kernels(*tensors, vec=None if aligned else 1)

    def ptr(t: torch.Tensor):
        return make_ptr(_DTYPES[x.dtype], t.data_ptr(), cute.AddressSpace.gmem, assumed_align=vec * x.element_size())
    kernel(*(ptr(t) for t in tensors), cutlass.Int32(tokens), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
