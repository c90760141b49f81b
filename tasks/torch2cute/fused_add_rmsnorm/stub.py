"""Fused residual add + RMSNorm in the CuTe DSL: a correct, deliberately slow start. Make it fast.

    s = x + residual (in fp32);   residual_out = s;   y = s * rsqrt(mean(s^2 over the row) + eps) * w

How a CuTe module is called here (tasks/README.md, "CuTe DSL"):
- `compile_kernels(x, residual, w, y, residual_out, *, eps)` compiles (cute.compile) every kernel `entry`
  launches, for the shapes and dtypes of its arguments, and caches them. It reads nothing of the tensors
  but shapes, strides and dtypes (the compile check calls it with fake tensors, without a GPU).
- `entry(...)` gets the compiled kernel through it and launches it on PyTorch's current stream.

This version: one warp per row, one scalar element per thread per step, sizes known only at run time.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import make_ptr

_DTYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
_compiled: dict[tuple, object] = {}


@cute.kernel
def _add_rmsnorm_rows(mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, mRo: cute.Tensor,
                      n: cutlass.Int32, eps: cutlass.Float32):
    lane, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    acc = cutlass.Float32(0.0)
    for j in cutlass.range(lane, n, 32):
        s = mX[row, j].to(cutlass.Float32) + mR[row, j].to(cutlass.Float32)
        mRo[row, j] = s.to(mRo.element_type)
        acc += s * s
    acc = cute.arch.warp_reduction_sum(acc)
    rstd = cute.math.rsqrt(acc / n.to(cutlass.Float32) + eps)
    for j in cutlass.range(lane, n, 32):
        s = mX[row, j].to(cutlass.Float32) + mR[row, j].to(cutlass.Float32)
        mY[row, j] = (s * rstd * mW[j].to(cutlass.Float32)).to(mY.element_type)


@cute.jit
def _add_rmsnorm(px: cute.Pointer, pr: cute.Pointer, pw: cute.Pointer, py: cute.Pointer, pro: cute.Pointer,
                 m: cutlass.Int32, n: cutlass.Int32, eps: cutlass.Float32, stream: cuda.CUstream):
    rows = cute.make_layout((m, n), stride=(n, 1))
    _add_rmsnorm_rows(cute.make_tensor(px, rows), cute.make_tensor(pr, rows), cute.make_tensor(pw, cute.make_layout(n)),
                      cute.make_tensor(py, rows), cute.make_tensor(pro, rows), n, eps).launch(
        grid=(m, 1, 1), block=(32, 1, 1), stream=stream)


def compile_kernels(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, y: torch.Tensor,
                    residual_out: torch.Tensor, *, eps: float):
    """The compiled kernel for this dtype (sizes are run-time arguments), compiled once."""
    key = (x.dtype,)
    if key not in _compiled:
        def ptr():
            return make_ptr(_DTYPES[x.dtype], 0, cute.AddressSpace.gmem)
        _compiled[key] = cute.compile(_add_rmsnorm, ptr(), ptr(), ptr(), ptr(), ptr(), cutlass.Int32(1),
                                      cutlass.Int32(1), cutlass.Float32(eps), cuda.CUstream(0))
    return _compiled[key]


def entry(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, y: torch.Tensor, residual_out: torch.Tensor,
          *, eps: float) -> None:
    """Write x + residual into residual_out and RMSNorm(x + residual) * w into y; return None."""
    m, n = x.shape
    if m == 0:
        return
    kernel = compile_kernels(x, residual, w, y, residual_out, eps=eps)

    def ptr(t: torch.Tensor):
        return make_ptr(_DTYPES[x.dtype], t.data_ptr(), cute.AddressSpace.gmem)
    kernel(*(ptr(t) for t in (x, residual, w, y, residual_out)), cutlass.Int32(m), cutlass.Int32(n),
           cutlass.Float32(eps), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
