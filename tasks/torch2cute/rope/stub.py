"""Rotary position embedding (NeoX style) in the CuTe DSL: a correct, deliberately slow start. Make it fast.

    x1, x2 = x[t, h, :D/2], x[t, h, D/2:]
    y[t, h, :D/2] = x1 * cos[t] - x2 * sin[t];   y[t, h, D/2:] = x2 * cos[t] + x1 * sin[t]

How a CuTe module is called here (tasks/README.md, "CuTe DSL"):
- `compile_kernels(x, cos, sin, y)` compiles (cute.compile) every kernel `entry` launches, for the shapes
  and dtypes of its arguments, and caches them. It reads nothing of the tensors but shapes, strides and
  dtypes (the compile check calls it with fake tensors, without a GPU).
- `entry(x, cos, sin, y)` gets the compiled kernel through it and launches it on PyTorch's current stream.

This version: one thread per (token, head, pair of rotated elements), scalar loads, run-time sizes.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import make_ptr

_DTYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
_compiled: dict[tuple, object] = {}


@cute.kernel
def _rope_pairs(mX: cute.Tensor, mC: cute.Tensor, mS: cute.Tensor, mY: cute.Tensor, tokens: cutlass.Int32,
                heads: cutlass.Int32, half: cutlass.Int32):
    tid, _, _ = cute.arch.thread_idx()
    bid, _, _ = cute.arch.block_idx()
    i = bid * 128 + tid
    if i < tokens * heads * half:
        t = i // (heads * half)
        h = (i // half) % heads
        j = i % half
        x1 = mX[t, h, j].to(cutlass.Float32)
        x2 = mX[t, h, half + j].to(cutlass.Float32)
        c = mC[t, j].to(cutlass.Float32)
        s = mS[t, j].to(cutlass.Float32)
        mY[t, h, j] = (x1 * c - x2 * s).to(mY.element_type)
        mY[t, h, half + j] = (x2 * c + x1 * s).to(mY.element_type)


@cute.jit
def _rope(px: cute.Pointer, pc: cute.Pointer, ps: cute.Pointer, py: cute.Pointer, tokens: cutlass.Int32,
          heads: cutlass.Int32, d: cutlass.Int32, stream: cuda.CUstream):
    half = d // 2
    x_layout = cute.make_layout((tokens, heads, d), stride=(heads * d, d, 1))
    table = cute.make_layout((tokens, half), stride=(half, 1))
    n = tokens * heads * half
    _rope_pairs(cute.make_tensor(px, x_layout), cute.make_tensor(pc, table), cute.make_tensor(ps, table),
                cute.make_tensor(py, x_layout), tokens, heads, half).launch(
        grid=((n + 127) // 128, 1, 1), block=(128, 1, 1), stream=stream)


def compile_kernels(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor):
    """The compiled kernel for this dtype (sizes are run-time arguments), compiled once."""
    key = (x.dtype,)
    if key not in _compiled:
        def ptr():
            return make_ptr(_DTYPES[x.dtype], 0, cute.AddressSpace.gmem)
        _compiled[key] = cute.compile(_rope, ptr(), ptr(), ptr(), ptr(), cutlass.Int32(1), cutlass.Int32(1),
                                      cutlass.Int32(2), cuda.CUstream(0))
    return _compiled[key]


def entry(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor) -> None:
    """Write the rotated x into y [T, H, D] (preallocated, the dtype of x); return None."""
    tokens, heads, d = x.shape
    if x.numel() == 0:
        return
    kernel = compile_kernels(x, cos, sin, y)

    def ptr(t: torch.Tensor):
        return make_ptr(_DTYPES[x.dtype], t.data_ptr(), cute.AddressSpace.gmem)
    kernel(*(ptr(t) for t in (x, cos, sin, y)), cutlass.Int32(tokens), cutlass.Int32(heads), cutlass.Int32(d),
           cuda.CUstream(torch.cuda.current_stream().cuda_stream))
