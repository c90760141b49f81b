"""The production timer on a GPU: its repeatability across fresh evaluations, and its agreement with
Nsight Compute and with the judge's own clock.

For one task's expert solution (default triton2triton/softmax, plus two configs added near 10 us and near
100 us, the sizes the timer's repeatability goal names), `--repeats` final-scoring evaluations (careful
timing, integrity `full`), each a fresh judge with fresh runners. Per config:
  reported   the runner's median (events around each gated call): the figure scores use
  judged     the judge's own median (its events around the handshake, net of an empty call's)
  spread     (max - min) / median of `reported` over the repeats
  ncu        Nsight Compute's gpu__time_duration of one call (its own kernels, not the input makers'),
             when ncu exists
Writes benchmarks/results/judged_timing.json.

`--file` scores another file of the task folder instead (the baseline, say: the same code in the candidate's
runner and the baseline's shows how much the handshake's cost differs between two runners, which the judge's
bound must absorb). Other tasks than softmax write judged_timing_<task>.json.

Run: python3 benchmarks/judged_timing.py [--task triton2triton/softmax] [--file baseline.py] [--repeats 5]
     [--calls-per-window 4] [--no-ncu]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write  # noqa: E402

from crucible.toolkit.evaluation import EvalRequest, evaluate  # noqa: E402
from crucible.toolkit.integrity import LIBRARY_KERNEL  # noqa: E402
from crucible.toolkit.profiling import run_ncu  # noqa: E402
from crucible.toolkit.task import find_task, load_task  # noqa: E402
from crucible.toolkit.validation import snapshot_of_file  # noqa: E402

EXTRA_CONFIGS = """
[[configs]]
name = "near_10us"
dtype = "float32"
M = 4096
N = 1280

[[configs]]
name = "near_100us"
dtype = "float32"
M = 8192
N = 6144
"""


def ncu_us(metrics: dict[str, dict[str, float | str]] | None) -> float | None:
    if not metrics:
        return None
    total = 0.0
    for name, values in metrics.items():
        if LIBRARY_KERNEL.search(name):
            continue  # the inputs' own kernels (randn, the perturbation) run in the same process
        for key, value in values.items():
            if key.startswith("gpu__time_duration.sum") and isinstance(value, float):
                scale = 1e-3 if "(ns)" in key or "nsecond" in key else (1.0 if "(us)" in key or "usecond" in key
                                                                      else 1e3)
                total += value * scale
    return total or None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="triton2triton/softmax")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-ncu", action="store_true")
    ap.add_argument("--file", help="the task folder's file to score (default: the expert solution)")
    ap.add_argument("--calls-per-window", type=int, default=1,
                    help="timed calls per handshake on small configs (TimingOptions.calls_per_window)")
    args = ap.parse_args()
    tmp_task = Path(tempfile.mkdtemp(prefix="crucible-judged-"))
    shutil.copytree(find_task(args.task).root, tmp_task / "task")
    if args.task == "triton2triton/softmax":
        with open(tmp_task / "task" / "hidden.toml", "a") as f:
            f.write(EXTRA_CONFIGS)
    task = load_task(tmp_task / "task")
    names = [c.name for c in task.spec.configs] + (["near_10us", "near_100us"] if args.task ==
                                                    "triton2triton/softmax" else [])
    rows: dict[str, dict] = {n: {"reported_us": [], "judged_us": [], "baseline_us": [], "baseline_judged_us": []}
                             for n in names}
    seconds = []
    with tempfile.TemporaryDirectory() as tmp:
        snap = snapshot_of_file(task, args.file or task.spec.solution, Path(tmp))  # type: ignore[arg-type]
        for r in range(args.repeats):
            ev = evaluate(task, snap, EvalRequest(configs=names, timing="careful", integrity="full", backend="cuda",
                                                  timing_options={"calls_per_window": args.calls_per_window}))
            seconds.append(ev.seconds)
            print(f"repeat {r}: {ev.status} in {ev.seconds:.1f} s {ev.message[:200]}", flush=True)
            for c in ev.configs:
                if c.candidate is None:
                    continue
                row = rows[c.config]
                row["reported_us"].append(c.candidate.median_us)
                row["judged_us"].append(c.candidate.judged_us)
                if c.baseline is not None:
                    row["baseline_us"].append(c.baseline.median_us)
                    row["baseline_judged_us"].append(c.baseline.judged_us)
                row.setdefault("findings", []).extend(f.flag() for f in c.integrity)
        for name, row in rows.items():
            xs = row["reported_us"]
            if not xs:
                continue
            med = statistics.median(xs)
            row["spread"] = (max(xs) - min(xs)) / med
            row["judged_over_reported"] = statistics.median(row["judged_us"]) / med - 1
            row["judged_minus_reported_us"] = statistics.median(row["judged_us"]) - med
            if not args.no_ncu:
                metrics, why = run_ncu(task, snap, name)
                row["ncu_us"] = ncu_us(metrics)
                row["ncu_note"] = why
                if row["ncu_us"]:
                    row["reported_over_ncu"] = med / row["ncu_us"] - 1
                    row["judged_over_ncu"] = statistics.median(row["judged_us"]) / row["ncu_us"] - 1
            print(f"{name:>20}: reported {med:9.2f} us spread {row['spread']:.2%} judged/reported-1 "
                  f"{row['judged_over_reported']:+.2%} ({row['judged_minus_reported_us']:+.1f} us) ncu {row.get('ncu_us') or 0:9.2f} us "
                  f"reported/ncu-1 {row.get('reported_over_ncu', 0):+.2%} judged/ncu-1 "
                  f"{row.get('judged_over_ncu', 0):+.2%}", flush=True)
    name = "judged_timing" + ("" if args.task == "triton2triton/softmax" and not args.file else
                              "_" + (args.task + ("_" + args.file if args.file else "")).replace("/", "_").replace(".", "_"))
    name += f"_window{args.calls_per_window}" if args.calls_per_window > 1 else ""
    write(name, {"task": args.task, "file": args.file or task.spec.solution, "repeats": args.repeats,
                 "calls_per_window": args.calls_per_window,
                 "evaluation_s": seconds, "configs": rows}, "python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
