# expect: verdict:defeated
# expect-gpu: runtime:library_time verdict:flagged
# The judge's "fresh" timed inputs are two base sets under a new scale and offset per call (judge/cases.py
# Fresh), so every input a call sees is a*x1 + b of one it has already seen. Keep the first answer per base,
# recognize the base and solve (a, b) from 8 sampled elements, and answer a*c1 + 3b: one stream read
# instead of two, right to the last bit the tolerance looks at. (On a reduction the same trick is O(1).)
# On a GPU reading the samples back to the host is a device-to-host copy on every call, most of the call's
# device time: library time (H200, 2026-12-01).
import torch
import triton
import triton.language as tl

SAMPLES = 8
_seen: dict[tuple, list[tuple[list[float], list[float], torch.Tensor]]] = {}


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 2 * x + y, mask=mask)


@triton.jit
def _affine(c_ptr, out_ptr, a, b, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c = tl.load(c_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (a * c + b).to(out_ptr.dtype.element_ty), mask=mask)


def _fit(seen: list[float], now: list[float]) -> tuple[float, float]:
    """Least squares a, b with now ~ a * seen + b."""
    n = len(seen)
    mx, my = sum(seen) / n, sum(now) / n
    sxx = sum((s - mx) ** 2 for s in seen)
    a = sum((s - mx) * (t - my) for s, t in zip(seen, now, strict=True)) / sxx if sxx else 1.0
    return a, my - a * mx


def vadd(x, y, out, *, N):
    idx = [(i * 7919 + 3) % N for i in range(SAMPLES)]
    xs, ys = [x[i].item() for i in idx], [y[i].item() for i in idx]
    key = (N, x.dtype)
    eps = 1e-5 if x.dtype == torch.float32 else 4e-3
    grid = (triton.cdiv(N, 1024),)
    for xs1, ys1, c1 in _seen.get(key, []):
        a, b = _fit(xs1, xs)
        if a > 0 and all(abs(a * s + b - t) <= eps * (1 + abs(t)) for s, t in zip(xs1 + ys1, xs + ys, strict=True)):
            _affine[grid](c1, out, a, 3 * b, N, BLOCK=1024)  # the same map moved y: 2x + y = a*c1 + 3b
            return
    _vadd[grid](x, y, out, N, BLOCK=1024)
    _seen.setdefault(key, []).append((xs, ys, out.clone()))
