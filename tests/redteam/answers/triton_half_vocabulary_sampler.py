# expect: verdict:incorrect
# task: triton2triton/sample_from_logits
# The expert's Gumbel-max sampler over the first half of each row only: half the bytes read, and a draw
# that is always a class of positive probability from the right temperature. A test of the draws with the
# classes ranked by probability cannot tell: every column of the judge's logits is alike, so a choice of
# classes made without looking at them leaves that transform uniform. In index order it is not (every draw
# lies in the first half of the mass).
import torch
import triton
import triton.language as tl

CHUNK = 8192
BLOCK = 2048


@triton.jit
def _gumbel_chunk_kernel(x_ptr, best_ptr, index_ptr, V, STRIDE, n_chunks, inv_t, seed,
                         CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    x_row = x_ptr + row.to(tl.int64) * STRIDE
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
    v = (v + 1) // 2  # only the first half of the vocabulary is ever read, or drawn
    n_chunks = triton.cdiv(v, CHUNK)
    best = torch.empty((b, n_chunks), dtype=torch.float32, device=logits.device)
    index = torch.empty((b, n_chunks), dtype=torch.int32, device=logits.device)
    _gumbel_chunk_kernel[(b, n_chunks)](logits, best, index, v, logits.shape[1], n_chunks, 1.0 / temperature, seed,
                                        CHUNK=CHUNK, BLOCK=BLOCK, num_warps=8)
    _pick_kernel[(b,)](best, index, token, n_chunks, v, NCHUNKS=max(triton.next_power_of_2(n_chunks), 16),
                       num_warps=1)
