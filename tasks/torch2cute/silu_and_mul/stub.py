"""SiLU-and-mul in the CuTe DSL: a correct, deliberately slow start. Make it fast.

    y[t, j] = silu(x[t, j]) * x[t, D + j],   silu(a) = a / (1 + exp(-a)),   x: [T, 2*D], y: [T, D]

How a CuTe module is called here (tasks/README.md, "CuTe DSL"):
- `compile_kernels(x, y)` compiles (cute.compile) every kernel `entry` launches, for the shapes and dtypes of
  its arguments, and caches them. It reads nothing of the tensors but shapes, strides and dtypes (the
  compile check calls it with fake tensors, without a GPU).
- `entry(x, y)` gets the compiled kernel through it and launches it on PyTorch's current stream.

This version: one thread per output element, scalar loads, sizes known only at run time.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import make_ptr

_DTYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
_compiled: dict[tuple, object] = {}


@cute.kernel
def _silu_and_mul_elements(mX: cute.Tensor, mY: cute.Tensor, t: cutlass.Int32, d: cutlass.Int32):
    tid, _, _ = cute.arch.thread_idx()
    bid, _, _ = cute.arch.block_idx()
    i = bid * 128 + tid
    if i < t * d:
        row = i // d
        col = i % d
        a = mX[row, col].to(cutlass.Float32)
        b = mX[row, d + col].to(cutlass.Float32)
        mY[row, col] = (a / (1.0 + cute.math.exp(-a)) * b).to(mY.element_type)


@cute.jit
def _silu_and_mul(px: cute.Pointer, py: cute.Pointer, t: cutlass.Int32, d: cutlass.Int32, stream: cuda.CUstream):
    mX = cute.make_tensor(px, cute.make_layout((t, 2 * d), stride=(2 * d, 1)))
    mY = cute.make_tensor(py, cute.make_layout((t, d), stride=(d, 1)))
    _silu_and_mul_elements(mX, mY, t, d).launch(grid=((t * d + 127) // 128, 1, 1), block=(128, 1, 1), stream=stream)


def compile_kernels(x: torch.Tensor, y: torch.Tensor):
    """The compiled kernel for this dtype (sizes are run-time arguments), compiled once."""
    key = (x.dtype,)
    if key not in _compiled:
        def ptr():
            return make_ptr(_DTYPES[x.dtype], 0, cute.AddressSpace.gmem)
        _compiled[key] = cute.compile(_silu_and_mul, ptr(), ptr(), cutlass.Int32(1), cutlass.Int32(1),
                                      cuda.CUstream(0))
    return _compiled[key]


def entry(x: torch.Tensor, y: torch.Tensor) -> None:
    """Write silu(x[:, :D]) * x[:, D:] into y [T, D] (preallocated, same dtype as x); return None."""
    t, d = y.shape
    if t == 0 or d == 0:
        return
    kernel = compile_kernels(x, y)

    def ptr(tensor: torch.Tensor):
        return make_ptr(_DTYPES[x.dtype], tensor.data_ptr(), cute.AddressSpace.gmem)
    kernel(ptr(x), ptr(y), cutlass.Int32(t), cutlass.Int32(d), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
