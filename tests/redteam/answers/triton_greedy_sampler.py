# expect: verdict:incorrect
# task: triton2triton/sample_from_logits
# A "sampler" that always returns each row's likeliest token (greedy decoding): one pass, no random numbers,
# deterministic, and right whenever an output is compared with a single draw of a peaked distribution. The
# draws are tested against the reference's probabilities instead.
import triton
import triton.language as tl


@triton.jit
def _argmax(x_ptr, out_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    where = tl.full([BLOCK], 0, tl.int32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row.to(tl.int64) * V + cols, mask=cols < V, other=float("-inf"))
        better = x > best
        best = tl.where(better, x, best)
        where = tl.where(better, cols, where)
    top = tl.max(best, axis=0)
    tl.store(out_ptr + row, tl.min(tl.where(best == top, where, V), axis=0).to(tl.int64))


def entry(logits, token, *, temperature, seed):
    b, v = logits.shape
    _argmax[(b,)](logits, token, v, BLOCK=1024)
