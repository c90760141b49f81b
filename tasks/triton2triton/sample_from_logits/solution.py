"""Sampling from softmax(logits / temperature) in Triton: the expert version (Hopper / H200).

Why it is faster than the baseline (one program per row, three passes, inverse-CDF):
- The Gumbel-max trick: argmax_j (x_j / T + g_j), with g_j = -log(-log(u_j)) for independent uniforms u_j,
  is distributed exactly as softmax(x / T). No max, no sum, no normalization: the row is read once, not
  three times, and every element is independent of the others, so a row splits over many programs.
- A row is cut into 8192-element chunks, one program each (grid B x ceil(V / 8192)): a single decoding
  sequence (B = 1) over a 128k vocabulary runs on 16 SMs instead of one, and a batch fills the GPU. Each
  program writes its chunk's best score and index; a second, tiny kernel takes each row's best (the first
  index on a tie, so the draw does not depend on the chunking's order of completion).
- The uniforms come from tl.rand (Philox) keyed by `seed` and the element's position, so a call is
  deterministic for a given seed. The Philox rounds are integer work that overlaps the loads: the kernel
  stays bound by reading the logits once (4 bytes per element).
Expected on the H200: near HBM bandwidth for the large batches (about 3x the baseline, which reads every
row three times), and 30-80x for batch 1, where the baseline runs one program on one SM.
"""

import torch
import triton
import triton.language as tl

CHUNK = 8192
BLOCK = 2048


@triton.jit
def _gumbel_chunk_kernel(x_ptr, best_ptr, index_ptr, V, n_chunks, inv_t, seed,
                         CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    x_row = x_ptr + row.to(tl.int64) * V
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    where = tl.full([BLOCK], 0, tl.int32)
    for start in range(chunk * CHUNK, tl.minimum(chunk * CHUNK + CHUNK, V), BLOCK):  # the last chunk stops at V
        cols = start + tl.arange(0, BLOCK)
        live = cols < V
        x = tl.load(x_row + cols, mask=live, other=float("-inf"))
        u = tl.rand(seed, row * V + cols)
        score = x * inv_t - tl.log(-tl.log(u))
        score = tl.where(live, score, float("-inf"))
        better = score > best  # strictly: the first (lowest) index keeps a tie
        best = tl.where(better, score, best)
        where = tl.where(better, cols, where)
    top = tl.max(best, axis=0)
    first = tl.min(tl.where(best == top, where, V), axis=0)
    tl.store(best_ptr + row * n_chunks + chunk, top)
    tl.store(index_ptr + row * n_chunks + chunk, first)


@triton.jit
def _pick_kernel(best_ptr, index_ptr, out_ptr, n_chunks, V, NCHUNKS: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, NCHUNKS)
    live = offs < n_chunks
    best = tl.load(best_ptr + row * n_chunks + offs, mask=live, other=float("-inf"))
    index = tl.load(index_ptr + row * n_chunks + offs, mask=live, other=V)
    top = tl.max(best, axis=0)
    tl.store(out_ptr + row, tl.min(tl.where(best == top, index, V), axis=0).to(tl.int64))


def entry(logits: torch.Tensor, token: torch.Tensor, *, temperature: float, seed: int) -> None:
    """One draw per row of logits [B, V] (float32) into token [B] (int64)."""
    b, v = logits.shape
    n_chunks = triton.cdiv(v, CHUNK)
    best = torch.empty((b, n_chunks), dtype=torch.float32, device=logits.device)
    index = torch.empty((b, n_chunks), dtype=torch.int32, device=logits.device)
    _gumbel_chunk_kernel[(b, n_chunks)](logits, best, index, v, n_chunks, 1.0 / temperature, seed,
                                        CHUNK=CHUNK, BLOCK=BLOCK, num_warps=8)
    _pick_kernel[(b,)](best, index, token, n_chunks, v, NCHUNKS=max(triton.next_power_of_2(n_chunks), 16),
                       num_warps=1)
