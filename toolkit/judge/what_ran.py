"""What one call ran, from the runner's profiler: a claim the judge weighs, never proof.

    what_ran_findings   forbidden ops; on a GPU the library kernels' share of the device time; in Triton's
                        CPU interpreter whether a Triton kernel ran and how much of the problem PyTorch did
    kernel_breakdown    the profile tool's table of one call's kernels
"""

from __future__ import annotations

from ..integrity import LIBRARY_KERNEL, finding
from ..protocol import Profiled
from ..results import IntegrityFinding, KernelTime
from ..toolchains import get_toolchain
from ..tripwires import shorten

BOOKKEEPING_OPS = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::zeros", "aten::zeros_like", "aten::ones",
    "aten::full", "aten::fill_", "aten::zero_", "aten::copy_", "aten::_to_copy", "aten::to", "aten::detach",
    "aten::view", "aten::reshape", "aten::as_strided", "aten::contiguous", "aten::clone", "aten::resize_",
    "aten::alias", "aten::lift_fresh", "aten::_reshape_alias", "aten::unsqueeze", "aten::squeeze",
    "aten::expand", "aten::t", "aten::transpose", "aten::permute", "aten::select", "aten::slice",
    "aten::narrow", "aten::item", "aten::_local_scalar_dense", "aten::flatten", "aten::unbind", "aten::split",
    "aten::chunk", "aten::new_empty", "aten::numpy_T", "aten::result_type", "aten::is_nonzero",
    "aten::view_as", "aten::expand_as", "aten::unflatten", "aten::_unsafe_view", "aten::set_",
}
"""Host ops that move or shape memory without computing; every other aten op is PyTorch doing the work."""



def what_ran_findings(prof: Profiled, forbid: list[str], share_max: float, language: str, on_gpu: bool,
                      output_elements: int, config: str) -> list[IntegrityFinding]:
    """What one call ran, from the runner's profiler: forbidden ops; on a GPU the library kernels' share
    of the device time; in the CPU interpreter whether a Triton kernel ran, and whether PyTorch computed
    on the whole problem (the interpreter is too slow for a time share to mean anything)."""
    found = []
    names = set(prof.ops) | {k.name for k in prof.kernels}
    hits = sorted({op for op in names for f in forbid if f in op})
    if hits:
        found.append(finding("forbidden_op", config, "ran " + ", ".join(hits[:5]) + " (the task forbids "
                             + ", ".join(forbid) + ")"))
    if on_gpu:
        total = sum(k.us for k in prof.kernels)
        library = [k for k in prof.kernels if LIBRARY_KERNEL.search(k.name)]
        lib_us = sum(k.us for k in library)
        if total > 0 and len(library) == len(prof.kernels):
            found.append(finding("no_own_kernel", config, "every device kernel of a call belongs to PyTorch or "
                                 "a library: " + _listing(library)))
        elif total > 0 and lib_us / total > share_max:
            found.append(finding("library_time", config, f"library kernels took {lib_us / total:.0%} of a "
                                 f"call's {total:.1f} us of device time (the task allows {share_max:.0%}): "
                                 + _listing(library)))
        return found
    if get_toolchain(language).runs_on_cpu and not prof.interpreter_launches:  # Triton's interpreter
        found.append(finding("no_own_kernel", config, "the call launched no Triton kernel"))
    compute = [k for k in prof.kernels if k.name.startswith("aten::") and k.name not in BOOKKEEPING_OPS]
    touched = sum(k.elements for k in compute)
    if compute and touched * 2 >= output_elements:  # in one op or in slices
        found.append(finding("library_time", config, f"PyTorch ops computed on {touched:,} elements inside the "
                             f"call (the output has {output_elements:,}): "
                             + ", ".join(sorted({k.name for k in compute})[:5])))
    return found


def _listing(kernels: list) -> str:
    return ", ".join(shorten(k.name, 70) for k in sorted(kernels, key=lambda k: -k.us)[:4]) or "none"


def kernel_breakdown(prof: Profiled) -> list[dict]:
    """The profile tool's table, from the runner's claims: kernels (or host ops on the CPU) of one call."""
    rows = [KernelTime(name=k.name, calls=max(1, round(k.calls)), total_us=k.us, mean_us=k.us / max(k.calls, 1e-9),
                       share=0.0) for k in prof.kernels if k.us > 0]
    grand = sum(r.total_us for r in rows) or 1.0
    return [r.model_copy(update={"share": r.total_us / grand}).model_dump() for r in rows[:30]]


