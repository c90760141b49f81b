"""EmbeddingBag(mode="sum") with offsets, fp32 tables (DLRM-style sparse features): the specification of the
task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """weight [NUM, D] fp32: an embedding table ~ N(0, 1); indices [NNZ] int64: the rows looked up, skewed as
    real categorical features are (a few hot rows take most lookups: rank = NUM * u^3, scattered over the
    table by a multiplicative hash); offsets [B + 1] int64: bag b is indices[offsets[b]:offsets[b + 1]],
    offsets[0] = 0, offsets[B] = NNZ, the B - 1 cuts uniform over [0, NNZ] (bag sizes roughly exponential
    around NNZ / B, an empty bag now and then)."""
    num, d, b, nnz = (int(config[k]) for k in ("NUM", "D", "B", "NNZ"))
    weight = torch.randn(num, d, generator=gen, device=gen.device, dtype=torch.float32)
    u = torch.rand(nnz, generator=gen, device=gen.device, dtype=torch.float64)
    rank = (num * u.pow(3)).long().clamp_(max=num - 1)
    indices = (rank * 2654435761) % num
    cuts = torch.randint(0, nnz + 1, (b - 1,), generator=gen, device=gen.device).sort().values
    zero = torch.zeros(1, dtype=torch.long, device=gen.device)
    offsets = torch.cat((zero, cuts, zero + nnz))
    return {"weight": weight.to(device), "indices": indices.to(device), "offsets": offsets.to(device)}


def reference(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, B: int, D: int, NUM: int,
              NNZ: int) -> torch.Tensor:
    """out[b] = sum of weight[indices[i]] for i in [offsets[b], offsets[b + 1]) (zeros for an empty bag);
    torch.nn.functional.embedding_bag, mode "sum", include_last_offset. Returns out [B, D] in weight's dtype."""
    assert weight.shape == (NUM, D) and indices.shape == (NNZ,) and offsets.shape == (B + 1,)
    return torch.nn.functional.embedding_bag(indices, weight, offsets, mode="sum", include_last_offset=True)
