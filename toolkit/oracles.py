"""The float64 oracles: the task's reference run in float64, and what a comparison against it shows.

Trusted side: the judge calls these on tensors it already holds, never on candidate code.

    float64_reference(reference, inputs, params)    floating inputs upcast with .double(), integer ones as
                                                    they are; every floating output must come back float64
                                                    (else OracleError, saying what the task author must do)
    precision_findings(outputs, refs, refs64, ...)  a candidate far further from float64 than the task's own
                                                    reference is, or NaN/Inf where float64 is finite
    nondeterminism_findings(first, second, ...)     two runs on the same inputs that differ bit for bit
    narrowed_outputs(reference, inputs, params)     task validation: float64 outputs that ignore the low bits
                                                    of their inputs (the reference rounds to fp32 inside)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .checking import values
from .integrity import finding
from .results import IntegrityFinding

PRECISION_RATIO = 100.0
"""An output more than this many times further from float64 than the reference itself is is flagged..."""
PRECISION_FLOOR = 2.0**-14
"""...when its relative L2 error also exceeds this (about 6e-5: well above fp32 reordering and fast-math
exp, well below what fp16, bf16 or tf32 arithmetic leaves)."""
NARROWING_JITTER = 2.0**-30
"""Relative nudge of float64 inputs that fp32 rounding erases (fp32 keeps 24 bits) but float64 keeps."""

FIX_HINT = ("Make `reference` compute in float64 when its floating inputs are float64 and return float64 "
            "outputs: e.g. `acc = torch.float64 if x.dtype == torch.float64 else torch.float32`, compute in "
            "`acc`, and cast the result to `x.dtype` instead of a hard-coded dtype. If an op truly has no "
            "float64 kernel, say so in task.toml: `[oracle]` with `float64 = false` and a `reason`.")


class OracleError(Exception):
    """The task's reference gives no float64 oracle: it raised on float64 inputs, or narrowed an output."""


def _outputs(value: object) -> list[Any]:
    return list(value) if isinstance(value, tuple | list) else [value]


def _name(names: Sequence[str], i: int) -> str:
    return f"output {i} ({names[i]})" if i < len(names) else f"output {i}"


def _upcast(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    # Clones: the reference must not be able to change the caller's tensors.
    return [t.double() if t.is_floating_point() else t.clone() for t in inputs]


def float64_reference(reference_fn: Callable[..., Any], inputs: list[torch.Tensor], params: dict[str, Any],
                      names: Sequence[str] = ()) -> list[torch.Tensor]:
    """The reference's outputs on float64 copies of the floating inputs (integer inputs unchanged), with the
    same params. Raises OracleError when it raises, or when a floating output is not float64."""
    try:
        with torch.no_grad():
            outs = _outputs(reference_fn(*_upcast(inputs), **params))
    except (MemoryError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as exc:  # the task's own code, whatever it raises: no oracle, said in one error
        raise OracleError(f"the reference raised {type(exc).__name__} on float64 inputs: {exc}. "
                          f"{FIX_HINT}") from exc
    for i, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            raise OracleError(f"the reference returned {type(out).__name__} as {_name(names, i)}, not a tensor")
        if out.is_floating_point() and out.dtype != torch.float64:
            raise OracleError(f"given float64 inputs, the reference returned {_name(names, i)} as "
                              f"{str(out.dtype).removeprefix('torch.')}, so there is no float64 oracle to "
                              f"measure precision against. {FIX_HINT}")
    return [o.detach() for o in outs]


def narrowed_outputs(reference_fn: Callable[..., Any], inputs: list[torch.Tensor], params: dict[str, Any],
                     names: Sequence[str] = ()) -> list[str]:
    """Floating outputs of the float64 reference that do not move at all when every floating input moves by
    a relative NARROWING_JITTER (random per element, so scale and shift invariance cannot hide it): the
    reference rounds them to fp32 or narrower inside, and the oracle is no better than the reference."""
    gen = torch.Generator().manual_seed(0)
    nudged = []
    for t in inputs:
        if t.is_floating_point():
            noise = torch.rand(t.shape, generator=gen, dtype=torch.float64).to(t.device) * 2 - 1
            t = t.double() * (1 + NARROWING_JITTER * noise)
        nudged.append(t)
    base = float64_reference(reference_fn, inputs, params, names)
    moved = float64_reference(reference_fn, nudged, params, names)
    return [_name(names, i) for i, (a, b) in enumerate(zip(base, moved, strict=True))
            if a.is_floating_point() and a.numel() > 0 and torch.equal(a, b)]


# ---------------------------------------------------------------- precision

def _rel_l2(out: torch.Tensor, ref64: torch.Tensor) -> float:
    diff = out.detach().to(torch.float64) - ref64
    denom = float(torch.linalg.vector_norm(ref64))
    return float(torch.linalg.vector_norm(diff)) / max(denom, 1e-300)


def precision_findings(outputs: list[torch.Tensor], refs: list[torch.Tensor], refs64: list[torch.Tensor],
                       names: list[str], config: str) -> list[IntegrityFinding]:
    """Compare the candidate's outputs and the task's reference outputs against the float64 reference's
    (`float64_reference`), floating outputs only. A finding: NaN or Inf where the float64 reference is
    finite (in the output's dtype: beyond its range Inf is the right rounding); or, where the float64
    reference is finite everywhere, a relative L2 error more than PRECISION_RATIO times the reference's
    own and above PRECISION_FLOOR."""
    found = []
    for name, out, ref, r64 in zip(names, outputs, refs, refs64, strict=False):
        if not out.is_floating_point() or r64.dtype != torch.float64:
            continue
        broken = torch.isfinite(values(r64.to(out.dtype))) & ~torch.isfinite(values(out.detach()))
        if bool(broken.any()):
            # The tolerance check lets NaN/Inf through only where the task's reference has it too: say so.
            shared = int((broken & ~torch.isfinite(values(ref.detach()))).sum())
            found.append(finding("precision", config,
                                  f"output {name}: {int(broken.sum())} of {out.numel()} elements are NaN or Inf "
                                  "where the float64 reference is finite"
                                  + (f" (so is the task's own reference at {shared} of them)" if shared else "")
                                  + ": overflow or 0/0 in lower precision?"))
            continue
        if not bool(torch.isfinite(r64).all()):
            continue  # no finite norm to compare against
        cand_err, ref_err = _rel_l2(out, r64), _rel_l2(ref, r64)
        if cand_err > max(PRECISION_RATIO * ref_err, PRECISION_FLOOR):
            found.append(finding("precision", config,
                                  f"output {name}: relative L2 error {cand_err:.2e} against a float64 reference, "
                                  f"where the task's own reference has {ref_err:.2e} "
                                  f"({cand_err / max(ref_err, 1e-300):.0f}x): computed in lower precision?"))
    return found


# ---------------------------------------------------------------- determinism

def nondeterminism_findings(first: list[torch.Tensor], second: list[torch.Tensor], names: list[str],
                            config: str) -> list[IntegrityFinding]:
    """Outputs of two runs on the same inputs that differ bit for bit (NaN where both have NaN is equal)."""
    found = []
    for name, a, b in zip(names, first, second, strict=True):
        if a.shape != b.shape or a.dtype != b.dtype:
            continue
        a, b = values(a), values(b)
        same = (torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
                if a.is_floating_point() else torch.equal(a, b))
        if not same:
            differ = int((a != b).sum()) if not a.is_floating_point() else int(
                ((a != b) & ~(a.isnan() & b.isnan())).sum())
            found.append(finding("nondeterminism", config,
                                  f"output {name}: two runs on the same inputs differ in {differ} of {a.numel()} "
                                  "elements"))
    return found
