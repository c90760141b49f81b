# expect: verdict:pass
# expect-gpu: runtime:nondeterminism
# Sums uneven parts of each result with float atomics from 32 programs: right within the tolerance, and on a
# GPU the last bits change from run to run (the interpreter runs programs in order, so there it is exact).
# The output is zeroed by a kernel of its own: torch's fill would be library time, another finding.
import triton
import triton.language as tl


@triton.jit
def _parts(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    part = tl.program_id(0)  # 32 programs per tile, side by side
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
    w = (part + 1) * (2.0 / (32 * 33))  # the 32 weights sum to 1
    tl.atomic_add(out_ptr + offs, v * w, mask=mask)


@triton.jit
def _zero(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=out_ptr.dtype.element_ty), mask=offs < n)


def vadd(x, y, out, *, N):
    _zero[(triton.cdiv(N, 1024),)](out, N, BLOCK=1024)
    _parts[(32, triton.cdiv(N, 1024))](x, y, out, N, BLOCK=1024)
