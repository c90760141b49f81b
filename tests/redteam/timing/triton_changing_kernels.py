# expect: runtime:timed_recheck verdict:flagged
# Two kernels that take turns once warm: the exact one, and one that skips reading y (it adds the mean of
# the y it last saw instead): one stream fewer every other call. A harness that checks one iteration and
# times many sees only the exact one checked.
import triton
import triton.language as tl

WARM = 8
_state: dict[tuple, list] = {}


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _vadd_no_y(x_ptr, out_ptr, y_mean, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (2 * x + y_mean).to(out_ptr.dtype.element_ty), mask=mask)


def vadd(x, y, out, *, N):
    st = _state.setdefault((N, x.dtype), [0, 0.0])
    st[0] += 1
    grid = (triton.cdiv(N, 1024),)
    if st[0] > WARM and st[0] % 2:
        _vadd_no_y[grid](x, out, st[1], N, BLOCK=1024)
        return
    _vadd[grid](x, y, out, N, BLOCK=1024)
    st[1] = y[0].item()  # a one-element "mean": cheap to keep
