"""Timing accuracy: crucible's median against Nsight Compute's gpu__time_duration for one-kernel calls.

Run: python3 benchmarks/timing_accuracy.py      (needs ncu on PATH; uses --clock-control none)
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import statistics
import subprocess
import sys

SIZES = {"small": (2048, 1024), "medium": (4096, 4096), "large": (16384, 8192)}


def inputs(label: str):
    import torch

    m, n = SIZES[label]
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(m, n, device="cuda", generator=g) for _ in range(4)]


def ours() -> dict:
    import torch

    from crucible.toolkit.timing import CAREFUL, time_subjects

    out = {}
    for label in SIZES:
        x = inputs(label)
        stats, _ = time_subjects({"k": lambda i, x=x: torch.softmax(x[i], dim=-1)}, 4, CAREFUL,
                                 torch.device("cuda"))
        out[label] = {"median_us": stats["k"].median_us, "method": stats["k"].method}
    return out


def ncu_child() -> None:
    import torch

    for label in SIZES:
        x = inputs(label)
        for i in range(20):
            torch.softmax(x[i % 4], dim=-1)
        torch.cuda.synchronize()


def ncu() -> dict:
    exe = shutil.which("ncu")
    if exe is None:
        raise SystemExit("ncu is not on PATH")
    cmd = [exe, "--csv", "--metrics", "gpu__time_duration.sum", "--clock-control", "none",
           "--cache-control", "all", "-k", "regex:softmax", sys.executable, __file__, "--ncu-child"]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = [r for r in csv.DictReader(io.StringIO(text[text.index('"ID"'):]))
            if r.get("Metric Name") == "gpu__time_duration.sum"]
    per = len(rows) // len(SIZES)
    out = {}
    for k, label in enumerate(SIZES):
        chunk = rows[k * per:(k + 1) * per][5:]  # drop the first launches (cold)
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[
            chunk[0]["Metric Unit"]]
        out[label] = statistics.median(float(r["Metric Value"].replace(",", "")) * scale for r in chunk)
    return out


def main() -> None:
    if "--ncu-child" in sys.argv:
        ncu_child()
        return
    if "--ours-child" in sys.argv:
        print("RESULT " + json.dumps(ours()))
        return
    text = subprocess.run([sys.executable, __file__, "--ours-child"], capture_output=True, text=True,
                          check=True).stdout
    mine = json.loads(text.split("RESULT ", 1)[1])
    theirs = ncu()
    figures = {label: {"crucible_us": mine[label]["median_us"], "method": mine[label]["method"],
                       "ncu_gpu_time_us": theirs[label],
                       "relative_difference": mine[label]["median_us"] / theirs[label] - 1} for label in SIZES}
    from common import write

    write("timing_accuracy", figures, "python3 benchmarks/timing_accuracy.py")
    for label, f in figures.items():
        print(f"{label}: crucible {f['crucible_us']:.2f} us, ncu {f['ncu_gpu_time_us']:.2f} us, "
              f"diff {100 * f['relative_difference']:+.2f}%")


if __name__ == "__main__":
    main()
