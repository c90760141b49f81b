import torch


def make_inputs(config, gen, device):
    dtype = getattr(torch, config["dtype"])
    n = config["N"]
    return {"x": torch.randn(n, generator=gen, device=device).to(dtype),
            "y": torch.randn(n, generator=gen, device=device).to(dtype)}


def reference(x, y, *, N):
    return 2 * x + y
