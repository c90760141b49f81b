"""SiLU-and-mul (SwiGLU) in TileLang: a correct, deliberately slow start. Make it fast.

    y[t, c] = silu(x[t, c]) * x[t, D + c],   silu(a) = a * sigmoid(a),   x: [T, 2D],   y: [T, D]

How a TileLang module is called here (tasks/README.md, "TileLang"):
- `compile_kernels(x, y)` compiles (`tilelang.compile`, no target: the environment picks it) every kernel
  `entry` launches, for the shapes and dtypes of its arguments, and caches them. It reads nothing of the
  tensors but shapes, strides and dtypes (the compile check calls it with fake tensors, without a GPU).
- `entry(x, y)` gets the compiled kernel through it and calls it with the tensors: TileLang launches it on
  PyTorch's current stream.

This version: one thread per token, a serial loop over its columns (uncoalesced), both sizes dynamic.
"""

import tilelang
import tilelang.language as T
import torch

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
_compiled: dict[tuple, object] = {}


def _silu_and_mul(dtype: str):
    Tn, D = T.dynamic("T"), T.dynamic("D")

    @T.prim_func
    def silu_and_mul(X: T.Tensor((Tn, 2 * D), dtype), Y: T.Tensor((Tn, D), dtype)):
        with T.Kernel(T.ceildiv(Tn, 32), threads=32) as bx:
            tx = T.get_thread_binding()
            row = bx * 32 + tx
            if row < Tn:
                for c in T.serial(D):
                    a = T.cast(X[row, c], "float32")
                    Y[row, c] = T.cast(a / (T.float32(1) + T.exp(-a)) * T.cast(X[row, D + c], "float32"), dtype)

    return silu_and_mul


def compile_kernels(x: torch.Tensor, y: torch.Tensor):
    """The compiled kernel for this dtype (sizes are run-time arguments), compiled once."""
    key = (x.dtype,)
    if key not in _compiled:
        _compiled[key] = tilelang.compile(_silu_and_mul(_DTYPES[x.dtype]))
    return _compiled[key]


def entry(x: torch.Tensor, y: torch.Tensor) -> None:
    """Write silu(x[:, :D]) * x[:, D:] into y [T, D]; return None."""
    if x.shape[0] == 0:
        return
    compile_kernels(x, y)(x, y)
