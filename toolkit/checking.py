"""Correctness: poison outputs, compare against the reference, and say where the first mismatch is.

Runs in the judge. The comparison is `|out - ref| <= atol + rtol * |ref|` per element, in float64, with NaN
or Inf in the output a mismatch unless the reference has the same value there. Outputs drawn at random
(check = "sample") are tested against the reference's probabilities instead (compare_samples).
"""

from __future__ import annotations

import math
import zlib

import torch

from .results import Mismatch, OutputCheck
from .task import TensorSpec, Tolerance

SAMPLE_ALPHA = 1e-6
"""Draws whose Kolmogorov-Smirnov p-value against the reference's probabilities is under this fail: an
honest sampler fails one check in a million."""

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
    if check.p_value is not None:
        return _describe_samples(check)
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


def check_output(spec: TensorSpec, out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> OutputCheck:
    """One output against the reference's, as its spec says: by value, or as draws from probabilities."""
    if spec.check == "sample":
        return compare_samples(spec.name, out, ref)
    return compare(spec.name, out, ref, tol.atol, tol.rtol)


def compare_samples(name: str, out: torch.Tensor, probs: torch.Tensor) -> OutputCheck:
    """Draws `out` (class indices) against `probs` (the same shape and one more dimension: the classes).

    A draw of a class of probability 0 (or outside the classes) fails outright. The rest is two tests of the
    draws' randomized probability integral transform (u = the mass of the classes before the draw's + U *
    its own mass, U uniform), which is uniform on [0, 1] for an honest sampler whatever the order of the
    classes: once with the classes ranked by probability (always taking the likeliest class gives u near 0,
    ignoring a temperature or a cut-off a skewed u), once in index order (a sampler that reads only part of
    the vocabulary never draws from the rest: u confined to part of [0, 1]), each by Kolmogorov-Smirnov at
    half of SAMPLE_ALPHA. The transforms are kept (OutputCheck._transforms) for pooled_samples: one call's
    draws are few at batch 1."""
    if tuple(out.shape) != tuple(probs.shape[:-1]):
        raise ValueError(f"output {name}: {tuple(out.shape)} draws, but the reference gives probabilities of shape "
                         f"{tuple(probs.shape)} (the draws' shape and the classes)")
    classes = probs.shape[-1]
    drawn = out.detach().to(torch.int64).reshape(-1).cpu()
    p = probs.detach().to(torch.float64).reshape(-1, classes).cpu()
    total = drawn.numel()
    unwritten = int((out == torch.iinfo(out.dtype).max).sum()) if not out.is_floating_point() else 0
    outside = (drawn < 0) | (drawn >= classes)
    index = drawn.clamp(0, classes - 1)[:, None]
    chosen = p.gather(1, index)[:, 0]
    impossible = outside | (chosen <= 0)
    first = None
    if bool(impossible.any()):
        flat = int(impossible.nonzero()[0, 0])
        at = [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(out.shape))]
        first = Mismatch(index=at, got=float(drawn[flat]), expected=0.0)
    jitter = torch.rand(total, generator=torch.Generator().manual_seed(zlib.crc32(drawn.numpy().tobytes())),
                        dtype=torch.float64)
    likelier = (p * (p > chosen[:, None])).sum(1)
    as_likely = (p * (p == chosen[:, None])).sum(1)
    ranked = likelier + jitter * as_likely
    before = p.cumsum(1).gather(1, index)[:, 0] - chosen  # the mass of the classes of smaller index
    in_order = before + jitter * chosen
    d, p_value = _two_tests(ranked, in_order)
    ok = not bool(impossible.any()) and p_value >= SAMPLE_ALPHA
    check = OutputCheck(name=name, ok=ok, max_abs_err=d, max_rel_err=0.0, mismatched=int(impossible.sum()),
                        total=total, unwritten=unwritten, first_mismatch=first, atol=0.0, rtol=0.0, p_value=p_value)
    check._transforms = [ranked, in_order]
    return check


def pooled_samples(name: str, checks: list[OutputCheck]) -> OutputCheck | None:
    """The probability-ranked test of compare_samples over the draws of several checked calls of one config
    together; None when there are none. Greedy decoding at batch 1 gives one draw a call, which no test of
    one call can tell from a sample. Not the index-order test: a sampler deterministic for a given seed (as
    tasks ask) draws with the same uniform in every call of the same seed, so an inverse-CDF sampler's
    in-order transforms repeat across calls, while the rank of the class it lands on still varies with
    the logits."""
    kept = [c._transforms[0] for c in checks if c._transforms]
    if not kept:
        return None
    ranked = torch.cat(kept)
    d, p_value = _kolmogorov_smirnov(ranked.sort().values)
    return OutputCheck(name=name, ok=p_value >= SAMPLE_ALPHA, max_abs_err=d, max_rel_err=0.0, mismatched=0,
                       total=int(ranked.numel()), unwritten=0, atol=0.0, rtol=0.0, p_value=p_value)


def _two_tests(ranked: torch.Tensor, in_order: torch.Tensor) -> tuple[float, float]:
    """The larger KS statistic and the Bonferroni p-value of both transforms (so SAMPLE_ALPHA stays the
    chance that an honest sampler fails)."""
    if not ranked.numel():
        return 0.0, 1.0
    (d1, p1), (d2, p2) = _kolmogorov_smirnov(ranked.sort().values), _kolmogorov_smirnov(in_order.sort().values)
    return max(d1, d2), min(1.0, 2 * min(p1, p2))


def _kolmogorov_smirnov(sorted_u: torch.Tensor) -> tuple[float, float]:
    """D of sorted values against the uniform on [0, 1], and its p-value (Kolmogorov's limit with
    Stephens' correction for small n)."""
    n = sorted_u.numel()
    i = torch.arange(1, n + 1, dtype=torch.float64)
    d = float(torch.maximum(i / n - sorted_u, sorted_u - (i - 1) / n).max())
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    if lam < 0.2:
        return d, 1.0
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return d, min(max(p, 0.0), 1.0)


def _describe_samples(check: OutputCheck) -> str:
    if check.ok:
        return (f"{check.name}: ok ({check.total:,} draws like the reference's probabilities: KS D "
                f"{check.max_abs_err:.3g}, p {check.p_value:.3g})")
    parts = [f"{check.name}: "]
    if check.mismatched:
        m = check.first_mismatch
        parts[0] += (f"{check.mismatched:,} of {check.total:,} draws are classes of probability 0 (or out of range)"
                     + (f"; first at {m.index}: class {m.got:.0f}" if m else ""))
    else:
        parts[0] += (f"{check.total:,} draws unlike the reference's probabilities (KS D {check.max_abs_err:.3g}, "
                     f"p {check.p_value:.2g} < {SAMPLE_ALPHA:g}): a biased sampler, or no sampling at all")
    if check.unwritten:
        parts.append(f"{check.unwritten:,} draws never written (still the poison)")
    return "; ".join(parts)
