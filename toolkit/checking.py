"""Correctness: poison outputs, compare against the reference, and say where the first mismatch is.

Runs inside the evaluation worker. The comparison is `|out - ref| <= atol + rtol * |ref|` per element,
in float64, with NaN or Inf in the output a mismatch unless the reference has the same value there.
"""

from __future__ import annotations

import torch

from .results import Mismatch, OutputCheck

FP8_NAN = 0x7F
"""A NaN's bits in both FP8 formats (e4m3fn: S.1111.111; e5m2: S.11111.11)."""


def is_fp8(t: torch.Tensor) -> bool:
    return t.is_floating_point() and t.element_size() == 1


def values(t: torch.Tensor) -> torch.Tensor:
    """An FP8 tensor as the float64 values it holds (exactly: few of torch's kernels take FP8); others as
    they are."""
    return t.double() if is_fp8(t) else t


def poison_(t: torch.Tensor) -> None:
    """Fill an output with a value no correct kernel writes, so an unwritten element cannot pass."""
    if is_fp8(t):  # few kernels of torch's take FP8
        t.view(torch.uint8).fill_(FP8_NAN)
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).max)


def _unwritten(t: torch.Tensor) -> int:
    if t.dtype.is_floating_point:
        return int(torch.isnan(t).sum())
    if t.dtype == torch.bool:
        return 0  # a bool poison is indistinguishable from a True; the value check covers it
    return int((t == torch.iinfo(t.dtype).max).sum())


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> OutputCheck:
    """Elementwise check of one output against its reference."""
    total = ref.numel()
    if out.shape != ref.shape:
        raise ValueError(f"output {name}: shape {tuple(out.shape)} but the reference has {tuple(ref.shape)}")
    unwritten = _unwritten(values(out)) if not torch.isnan(values(ref)).any() else 0
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    diff = (o - r).abs()
    same_special = (o == r) | (torch.isnan(o) & torch.isnan(r))  # inf == inf, nan where ref has nan
    bad = ~(same_special | (diff <= atol + rtol * r.abs()))
    finite_diff = torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff))
    max_abs = float(finite_diff.max()) if total else 0.0
    if bool((~torch.isfinite(diff) & ~same_special).any()):
        max_abs = float("inf")
    rel = finite_diff / r.abs().clamp_min(1e-12)
    max_rel = float(rel.max()) if total else 0.0
    mismatched = int(bad.sum())
    first = None
    if mismatched:
        flat = int(bad.flatten().nonzero()[0, 0])
        index = [int(i) for i in torch.unravel_index(torch.tensor(flat), ref.shape)]
        first = Mismatch(index=index, got=float(o.flatten()[flat]), expected=float(r.flatten()[flat]))
    return OutputCheck(name=name, ok=mismatched == 0, max_abs_err=max_abs, max_rel_err=max_rel,
                       mismatched=mismatched, total=total, unwritten=unwritten, first_mismatch=first,
                       atol=atol, rtol=rtol)


def describe(check: OutputCheck) -> str:
    """One line an agent can act on."""
    if check.ok:
        return f"{check.name}: ok (max abs err {check.max_abs_err:.3g}, max rel err {check.max_rel_err:.3g})"
    parts = [f"{check.name}: {check.mismatched:,} of {check.total:,} elements outside "
             f"atol={check.atol:g} rtol={check.rtol:g}"]
    if check.first_mismatch:
        m = check.first_mismatch
        parts.append(f"first at {m.index} (got {m.got:.6g}, expected {m.expected:.6g})")
    parts.append(f"max abs err {check.max_abs_err:.3g}")
    if check.unwritten:
        parts.append(f"{check.unwritten:,} elements never written (still the NaN poison)")
    return "; ".join(parts)
