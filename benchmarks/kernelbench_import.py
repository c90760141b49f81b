"""How well `crucible import kernelbench` covers KernelBench levels 1 and 2.

    python3 benchmarks/kernelbench_import.py KERNELBENCH_CHECKOUT [--out DIR] [--jobs K]

Imports every problem of KernelBench/level1 and level2 (torch2triton) into DIR (a temporary folder by
default) and writes benchmarks/results/kernelbench_import.json: per level, the share imported, the hidden
configs per task, the tasks with at least 4 hidden configs that change every size, the tied-dimension tasks
(two sizes equal in every config, so no config tells them apart), and the refusals by reason with their
messages. Runs on the CPU: the importer traces on meta tensors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write  # noqa: E402

from crucible.harness.importers.kernelbench import RECORD, Outcome, Record, import_batch  # noqa: E402
from crucible.toolkit.task import load_task  # noqa: E402

MIN_HIDDEN = 4


def task_figures(folder: Path) -> dict:
    """Hidden configs, how many change every size, and the pairs of sizes no config tells apart."""
    task = load_task(folder)
    rec = Record.model_validate_json((folder / RECORD).read_text())
    sizes = [s for s in rec.sizes if s not in rec.follows]  # a size the file spells twice is one size
    visible = task.configs("visible")[0].values
    hidden = task.configs("hidden")
    differ = [c.name for c in hidden if all(c.values[s] != visible[s] for s in sizes)]
    every = [visible] + [c.values for c in hidden]
    tied = [(a, b) for i, a in enumerate(sizes) for b in sizes[i + 1:] if all(v[a] == v[b] for v in every)]
    return {"hidden": len(hidden), "differ_on_every_size": len(differ), "tied": tied, "sizes": len(sizes)}


def level_figures(outcomes: list[Outcome], out: Path) -> dict:
    imported = [o for o in outcomes if o.status == "imported"]
    refused = [o for o in outcomes if o.status == "refused"]
    tasks = {o.task: task_figures(out / o.task) for o in imported if o.task}
    hidden = [t["hidden"] for t in tasks.values()]
    return {
        "problems": len(outcomes),
        "imported": len(imported),
        "imported_pct": round(100 * len(imported) / len(outcomes), 1) if outcomes else 0.0,
        "with_4_hidden_differing": sum(t["differ_on_every_size"] >= MIN_HIDDEN for t in tasks.values()),
        "hidden_configs": {"min": min(hidden, default=0), "median": statistics.median(hidden) if hidden else 0,
                           "histogram": dict(sorted(Counter(hidden).items()))},
        "tied_dimension_tasks": sorted(k for k, t in tasks.items() if t["tied"]),
        "refused_by_reason": dict(Counter(o.reason or "" for o in refused)),
        "refusals": [{"problem": Path(o.path).name, "reason": o.reason, "message": o.message[:400]}
                     for o in refused],
        "tasks": tasks,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkout", help="a KernelBench checkout (its KernelBench/level1, level2 folders)")
    p.add_argument("--out", help="where the tasks go (default: a temporary folder, removed after)")
    p.add_argument("--jobs", type=int, default=2, help="problems traced side by side")
    args = p.parse_args()
    root = Path(args.checkout) / "KernelBench"
    levels = {f"level{n}": sorted(root.glob(f"level{n}/*.py")) for n in (1, 2)}
    if not all(levels.values()):
        print(f"no problems under {root}/level1 and level2: give the path of a KernelBench checkout", file=sys.stderr)
        return 2
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="crucible-kb-") as tmp:
        out = Path(args.out or tmp)
        figures: dict = {}
        for level, paths in levels.items():
            with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each import traces in a subprocess
                outcomes = [o for batch in pool.map(lambda q: import_batch([q], out, force=True), paths)
                            for o in batch]
            figures[level] = level_figures(outcomes, out)
            f = figures[level]
            print(f"{level}: imported {f['imported']} of {f['problems']} ({f['imported_pct']}%); "
                  f">= {MIN_HIDDEN} hidden configs changing every size: {f['with_4_hidden_differing']}; "
                  f"tied-dimension tasks: {len(f['tied_dimension_tasks'])}; refused: {f['refused_by_reason']}",
                  flush=True)
        total = sum(f["problems"] for f in figures.values())
        done = sum(f["imported"] for f in figures.values())
        figures["overall"] = {"problems": total, "imported": done, "imported_pct": round(100 * done / total, 1),
                              "with_4_hidden_differing": sum(f["with_4_hidden_differing"] for k, f in figures.items()
                                                             if k.startswith("level")),
                              "tied_dimension_tasks": sum(len(f["tied_dimension_tasks"]) for k, f in figures.items()
                                                          if k.startswith("level")),
                              "seconds": round(time.perf_counter() - started, 1)}
    command = "python3 benchmarks/kernelbench_import.py " + " ".join(sys.argv[1:])
    path = write("kernelbench_import", figures, command)
    print(json.dumps(figures["overall"]))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
