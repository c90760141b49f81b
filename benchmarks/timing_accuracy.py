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


def ncu_child(label: str) -> None:
    import torch

    x = inputs(label)
    torch.cuda.synchronize()
    for i in range(20):
        torch.softmax(x[i % 4], dim=-1)
    torch.cuda.synchronize()


def ncu() -> dict:
    """Per size: the median gpu__time_duration of the softmax kernel (PyTorch names it `softmax_warp_forward`
    or `cunn_SoftMaxForward`), the first launches dropped. One ncu run per size, so rows cannot mix."""
    exe = shutil.which("ncu")
    if exe is None:
        raise SystemExit("ncu is not on PATH")
    out = {}
    for label in SIZES:
        cmd = [exe, "--csv", "--metrics", "gpu__time_duration.sum", "--clock-control", "none",
               "--cache-control", "all", "-k", "regex:[Ss]oft[Mm]ax", sys.executable, __file__, "--ncu-child", label]
        text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        rows = [r for r in csv.DictReader(io.StringIO(text[text.index('"ID"'):]))
                if r.get("Metric Name") == "gpu__time_duration.sum"]
        if len(rows) != 20:
            raise SystemExit(f"{label}: expected 20 softmax launches under ncu, saw {len(rows)}:\n{text[-2000:]}")
        units = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
        out[label] = {"median_us": statistics.median(float(r["Metric Value"].replace(",", "")) * units[r["Metric Unit"]]
                                                     for r in rows[5:]),
                      "kernel": rows[0]["Kernel Name"][:80]}
    return out


def main() -> None:
    if "--ncu-child" in sys.argv:
        ncu_child(sys.argv[-1])
        return
    if "--ours-child" in sys.argv:
        print("RESULT " + json.dumps(ours()))
        return
    text = subprocess.run([sys.executable, __file__, "--ours-child"], capture_output=True, text=True,
                          check=True).stdout
    mine = json.loads(text.split("RESULT ", 1)[1])
    theirs = ncu()
    figures = {label: {"crucible_us": mine[label]["median_us"], "method": mine[label]["method"],
                       "ncu_gpu_time_us": theirs[label]["median_us"], "kernel": theirs[label]["kernel"],
                       "relative_difference": mine[label]["median_us"] / theirs[label]["median_us"] - 1}
               for label in SIZES}
    from common import write

    write("timing_accuracy", figures, "python3 benchmarks/timing_accuracy.py")
    for label, f in figures.items():
        print(f"{label}: crucible {f['crucible_us']:.2f} us, ncu {f['ncu_gpu_time_us']:.2f} us, "
              f"diff {100 * f['relative_difference']:+.2f}%")


if __name__ == "__main__":
    main()
