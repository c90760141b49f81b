"""Timing repeatability: one candidate timed in 10 fresh processes; spread = (max - min) / median.

Compares crucible's timer (toolkit/timing.py, careful options) with Triton's do_bench (median) and a
KernelBench-style event timer (mean of 100 back-to-back calls), for torch.softmax at a ~10 us and a
~100+ us size.   Run: python3 benchmarks/timing_repeatability.py [--procs 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

SIZES = {"small": (2048, 1024), "large": (16384, 8192)}  # float32 softmax rows x cols


def one_process() -> dict:
    import torch
    import triton.testing

    from crucible.toolkit.timing import CAREFUL, time_subjects

    out = {}
    for label, (m, n) in SIZES.items():
        x = [torch.randn(m, n, device="cuda") for _ in range(4)]
        fn = lambda i, x=x: torch.softmax(x[i], dim=-1)  # noqa: E731
        stats, _ = time_subjects({"softmax": fn}, 4, CAREFUL, torch.device("cuda"))
        ours = stats["softmax"]
        dob = triton.testing.do_bench(lambda fn=fn: fn(0), return_mode="median") * 1e3
        # KernelBench-style: events around each call, no flush, mean of 100
        ts = []
        for _ in range(10):
            fn(0)
        torch.cuda.synchronize()
        for _ in range(100):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(0)
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) * 1e3)
        out[label] = {"crucible_us": ours.median_us, "crucible_method": ours.method, "crucible_reps": ours.reps,
                      "do_bench_us": dob, "event_mean_us": statistics.mean(ts)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=10)
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(one_process()))
        return
    runs = []
    for _ in range(args.procs):
        text = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True,
                              check=True).stdout
        runs.append(json.loads(text.split("RESULT ", 1)[1]))
    figures = {}
    for label in SIZES:
        figures[label] = {"shape": SIZES[label]}
        for method in ("crucible_us", "do_bench_us", "event_mean_us"):
            xs = [r[label][method] for r in runs]
            med = statistics.median(xs)
            figures[label][method.removesuffix("_us")] = {
                "median_us": med, "spread": (max(xs) - min(xs)) / med, "values_us": xs}
        figures[label]["crucible_method"] = runs[0][label]["crucible_method"]
    from common import write

    write("timing_repeatability", figures, f"python3 benchmarks/timing_repeatability.py --procs {args.procs}")
    for label, f in figures.items():
        print(f"{label}: " + ", ".join(f"{k} {v['median_us']:.2f} us spread {100 * v['spread']:.2f}%"
                                        for k, v in f.items() if isinstance(v, dict)))


if __name__ == "__main__":
    main()
