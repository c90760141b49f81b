"""Rotary position embedding (NeoX / Llama style) in TileLang: a correct, deliberately slow start. Make it fast.

    y[t, h, j]     = x[t, h, j] * cos[t, j] - x[t, h, j + D/2] * sin[t, j]
    y[t, h, j+D/2] = x[t, h, j + D/2] * cos[t, j] + x[t, h, j] * sin[t, j]       (j < D/2)

How a TileLang module is called here (tasks/README.md, "TileLang"):
- `compile_kernels(x, cos, sin, y)` compiles (`tilelang.compile`, no target: the environment picks it) every
  kernel `entry` launches, for the shapes and dtypes of its arguments, and caches them. It reads nothing of
  the tensors but shapes, strides and dtypes (the compile check calls it with fake tensors, without a GPU).
- `entry(x, cos, sin, y)` gets the compiled kernel through it and calls it with the tensors: TileLang
  launches it on PyTorch's current stream.

This version: one thread per (token, head), a serial loop over the head's pairs, all sizes dynamic.
"""

import tilelang
import tilelang.language as T
import torch

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
_compiled: dict[tuple, object] = {}


def _rope(dtype: str):
    Tn, H, HALF = T.dynamic("T"), T.dynamic("H"), T.dynamic("HALF")

    @T.prim_func
    def rope(X: T.Tensor((Tn, H, 2 * HALF), dtype), C: T.Tensor((Tn, HALF), dtype), S: T.Tensor((Tn, HALF), dtype),
             Y: T.Tensor((Tn, H, 2 * HALF), dtype)):
        with T.Kernel(T.ceildiv(Tn * H, 64), threads=64) as bx:
            tx = T.get_thread_binding()
            n = bx * 64 + tx
            if n < Tn * H:
                for j in T.serial(HALF):
                    c = T.cast(C[n // H, j], "float32")
                    s = T.cast(S[n // H, j], "float32")
                    x1 = T.cast(X[n // H, n % H, j], "float32")
                    x2 = T.cast(X[n // H, n % H, j + HALF], "float32")
                    Y[n // H, n % H, j] = T.cast(x1 * c - x2 * s, dtype)
                    Y[n // H, n % H, j + HALF] = T.cast(x2 * c + x1 * s, dtype)

    return rope


def compile_kernels(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor):
    """The compiled kernel for this dtype (sizes are run-time arguments), compiled once."""
    key = (x.dtype,)
    if key not in _compiled:
        _compiled[key] = tilelang.compile(_rope(_DTYPES[x.dtype]))
    return _compiled[key]


def entry(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor) -> None:
    """Write the rotated x into y [T, H, D]; return None."""
    if x.shape[0] == 0:
        return
    compile_kernels(x, cos, sin, y)(x, cos, sin, y)
