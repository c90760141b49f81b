"""Token + position embedding (GPT-2 / OPT / BERT style): the specification of the task, and the eager
baseline it is timed against."""

from __future__ import annotations

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """wte [V, D]: token embeddings; wpe [P, D]: position embeddings (both ~N(0, 0.02^2) scaled up to ~1);
    ids [T]: random token ids in [0, V); pos [T]: positions of packed sequences of random lengths."""
    v, p, t, d = int(config["V"]), int(config["P"]), int(config["T"]), int(config["D"])
    dtype = DTYPES[config["dtype"]]
    wte = torch.randn(v, d, generator=gen, device=gen.device, dtype=torch.float32)
    wpe = torch.randn(p, d, generator=gen, device=gen.device, dtype=torch.float32) * 0.5
    ids = torch.randint(0, v, (t,), generator=gen, device=gen.device)
    # Packed batch: sequences of random lengths (<= P) back to back; each restarts at position 0.
    lengths = torch.randint(1, p + 1, (t,), generator=gen, device=gen.device)
    starts = torch.cumsum(lengths, 0) - lengths
    idx = torch.arange(t, device=gen.device)
    seq = torch.searchsorted(starts, idx, right=True) - 1
    pos = idx - starts[seq]
    return {"wte": wte.to(device=device, dtype=dtype), "wpe": wpe.to(device=device, dtype=dtype),
            "ids": ids.to(device), "pos": pos.to(device)}


def reference(wte: torch.Tensor, wpe: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """out[t] = wte[ids[t]] + wpe[pos[t]]."""
    return F.embedding(ids, wte) + F.embedding(pos, wpe)
