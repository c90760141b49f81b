"""Experiment: which L2 flush, and whether subtracting an empty graph's replay, brings graph-replay timing
closest to ncu's gpu__time_duration (ncu on the same H200: 7.90, 54.56, 545.34 us for these sizes)."""

import statistics

import torch

SIZES = {"small": (2048, 1024), "medium": (4096, 4096), "large": (16384, 8192)}
dev = torch.device("cuda")
l2 = torch.cuda.get_device_properties(dev).L2_cache_size
buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device=dev)
acc = torch.empty((), dtype=torch.int64, device=dev)
flushes = {"write": lambda: buf.zero_(), "read": lambda: torch.sum(buf, dim=0, out=acc)}


def graph_of(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def time_graph(g, flush, reps=300):
    xs = []
    for _ in range(reps):
        flush()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        xs.append((a, b))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 for a, b in xs)


tiny = torch.zeros(1, device=dev)
empty_graph = graph_of(lambda: tiny.add_(0))
for fname, flush in flushes.items():
    null = time_graph(empty_graph, flush)
    row = [f"flush={fname} null={null:.2f}us"]
    for label, (m, n) in SIZES.items():
        x = torch.randn(m, n, device=dev)
        g = graph_of(lambda x=x: torch.softmax(x, dim=-1))
        t = time_graph(g, flush)
        row.append(f"{label} {t:.2f} (minus null {t - null:.2f})")
    print("; ".join(row))
