"""Sampling from softmax(logits / temperature) in Triton: a straightforward first version.

One program per row walks the row in 1024-element chunks three times: pass 1 finds the row max, pass 2
sums exp((x - max) / temperature), pass 3 draws one uniform u for the row and returns the first index whose
running sum of exp((x - max) / temperature) passes u * sum (inverse-CDF sampling). The uniform comes from
Triton's counter-based generator (tl.rand: Philox) keyed by `seed` and the row, so a call is deterministic
for a given seed.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _sample_kernel(x_ptr, out_ptr, V, inv_t, seed, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * V

    # Pass 1: the row max.
    acc_max = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf"))
        acc_max = tl.maximum(acc_max, x)
    row_max = tl.max(acc_max, axis=0)

    # Pass 2: the sum of the unnormalized probabilities.
    acc_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf"))
        acc_sum += tl.exp((x - row_max) * inv_t)
    total = tl.sum(acc_sum, axis=0)

    # Pass 3: the first index whose running sum passes u * total.
    target = tl.rand(seed, row) * total
    running = 0.0
    chosen = V - 1  # rounding can leave the target a hair above the last running sum
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf"))
        csum = tl.cumsum(tl.exp((x - row_max) * inv_t), axis=0) + running
        first = tl.min(tl.where((csum > target) & (cols < V), cols, V), axis=0)
        chosen = tl.minimum(chosen, first)
        running += tl.sum(tl.exp((x - row_max) * inv_t), axis=0)
    tl.store(out_ptr + row, chosen.to(tl.int64))


def entry(logits: torch.Tensor, token: torch.Tensor, *, temperature: float, seed: int) -> None:
    """One draw per row of logits [B, V] (float32) into token [B] (int64)."""
    b, v = logits.shape
    _sample_kernel[(b,)](logits, token, v, 1.0 / temperature, seed, BLOCK=1024, num_warps=4)
