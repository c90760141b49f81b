"""Load a kernel as the destination-passing call `kernel(inputs, outputs, params)`, per loader.

Toolchains name their loader (toolkit/toolchains); a new kernel language either reuses one of these or
adds one here.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..protocol import CallSignature, KernelSpec

Kernel = Callable[[list[torch.Tensor], list[torch.Tensor], dict[str, Any]], None]
CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float, "float64": ctypes.c_double}


class CandidateError(Exception):
    """The kernel could not be loaded or called as the task's signature says."""


def import_file(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CandidateError(f"cannot import {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton's jit resolves globals through the module
    spec.loader.exec_module(module)
    return module


def python_module(spec: KernelSpec, signature: CallSignature, name: str) -> Kernel:
    path = Path(spec.path)
    sys.path.insert(0, str(path.parent))  # a candidate may import its own helper modules
    fn = getattr(import_file(path, f"crucible_{name}"), spec.entry, None)
    if not callable(fn):
        raise CandidateError(f"{path.name} defines no function {spec.entry!r}; the task's entry point is "
                             f"{spec.entry}(...)")

    def call(inputs: list[torch.Tensor], outputs: list[torch.Tensor], params: dict[str, Any]) -> None:
        if fn(*inputs, *outputs, **params) is not None:
            raise CandidateError(f"{spec.entry}() returned a value; write the results into the output tensors "
                                 "it is given and return None")
    return call


def shared_library(spec: KernelSpec, signature: CallSignature, name: str) -> Kernel:
    """`extern "C" int entry(in_ptrs..., out_ptrs..., params..., stream)` returning a CUDA error code."""
    lib = ctypes.CDLL(spec.path)
    try:
        fn = getattr(lib, spec.entry)
    except AttributeError:
        raise CandidateError(f'the library exports no function {spec.entry!r}: declare it `extern "C" int '
                             f'{spec.entry}(...)`') from None
    fn.restype = ctypes.c_int
    fn.argtypes = ([ctypes.c_void_p] * (len(signature.inputs) + len(signature.outputs))
                   + [CTYPES[p.type] for p in signature.params] + [ctypes.c_void_p])

    def call(inputs: list[torch.Tensor], outputs: list[torch.Tensor], params: dict[str, Any]) -> None:
        stream = torch.cuda.current_stream().cuda_stream if inputs[0].is_cuda else 0
        code = fn(*[t.data_ptr() for t in inputs + outputs], *[params[p.name] for p in signature.params], stream)
        if code != 0:
            raise CandidateError(f"{spec.entry}() returned error code {code}: {cuda_error_name(code)}")
    return call


def cuda_error_name(code: int) -> str:
    try:
        return str(torch.cuda.cudart().cudaGetErrorString(code))
    except (RuntimeError, AttributeError):
        return "unknown error"


def reference(spec: KernelSpec, signature: CallSignature, name: str) -> Kernel:
    """The task's PyTorch reference in the candidates' calling convention (the torch2X baseline)."""
    fn = getattr(import_file(Path(spec.path), f"crucible_{name}"), spec.entry)
    if spec.compiled:
        fn = torch.compile(fn)

    def call(inputs: list[torch.Tensor], outputs: list[torch.Tensor], params: dict[str, Any]) -> None:
        results = fn(*inputs, **params)
        for out, res in zip(outputs, results if isinstance(results, tuple | list) else (results,), strict=True):
            out.copy_(res)
    return call


LOADERS: dict[str, Callable[[KernelSpec, CallSignature, str], Kernel]] = {
    "python_module": python_module, "shared_library": shared_library, "reference": reference}


def load(spec: KernelSpec, signature: CallSignature, name: str) -> Kernel:
    return LOADERS[spec.loader](spec, signature, name)
