"""Nsight Compute inside the worker: run the candidate on one config under `ncu` and read its metrics.

    worker job "ncu"  ->  ncu --csv --metrics ... python -m crucible.toolkit.ncu <payload.json>
                                                  (this module's __main__: three calls of the candidate)

ncu is slow (it replays each kernel once per metric pass), so this runs only when the caller asks.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

CALLS = 3


def parse_csv(text: str) -> dict[str, dict[str, float | str]]:
    """ncu --csv output -> {kernel name: {metric: value}} (the last launch of each kernel)."""
    start = text.find('"ID"')
    if start < 0:
        return {}
    out: dict[str, dict[str, float | str]] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        name = row.get("Kernel Name", "?")
        metric = row.get("Metric Name")
        if not metric:
            continue
        raw = (row.get("Metric Value") or "").replace(",", "")
        try:
            value: float | str = float(raw)
        except ValueError:
            value = raw
        unit = row.get("Metric Unit") or ""
        out.setdefault(name[:200], {})[f"{metric} ({unit})" if unit else metric] = value
    return out


def run_ncu_job(payload: dict, progress: Callable[[dict], None]) -> dict:
    exe = shutil.which("ncu")
    if exe is None:
        return {"error": "ncu is not on PATH"}
    spec = Path("ncu-payload.json").resolve()  # the worker's cwd is its scratch folder
    spec.write_text(json.dumps(payload))
    cmd = [exe, "--csv", "--metrics", ",".join(payload["metrics"]), "--clock-control", "none",
           "--target-processes", "all", sys.executable, "-m", "crucible.toolkit.ncu", str(spec)]
    progress({"stage": "ncu", "config": payload["config"]})
    env = {**os.environ, "TMPDIR": str(spec.parent)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        return {"error": f"ncu exited with {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}"}
    return {"kernels": parse_csv(proc.stdout)}


def _target(spec_path: str) -> None:
    """Run under ncu: the candidate, three calls on the config's seed-0 inputs, in this process's own
    Landlock domain when the worker asks for one."""
    import torch

    from .judge.cases import DTYPES, Case
    from .judge.evaluate import signature_of
    from .protocol import KernelSpec
    from .runner.loading import import_file, load
    from .task import load_task, output_shape, resolve_dtype

    payload = json.loads(Path(spec_path).read_text())
    task = load_task(Path(payload["task_root"]))
    ref = import_file(task.file("reference.py"), "crucible_reference")
    config = task.config(payload["config"])
    case = Case(task, ref, config, 0, torch.device("cuda"))
    spec = KernelSpec.model_validate(payload["candidate"])
    if payload.get("landlock_writable"):  # the worker left the restriction to this process (jobs.py)
        from .sandbox import restrict_filesystem, runner_readable

        # The task is loaded: from here on this process reads only what a runner may (no hidden configs).
        restrict_filesystem(payload["landlock_writable"],
                            runner_readable([payload["snapshot_root"], spec.path, *payload["landlock_writable"]]))
    kernel = load(spec, signature_of(task), "candidate")
    outs = [torch.empty(output_shape(o, config), dtype=DTYPES[resolve_dtype(o.dtype, config)], device="cuda")
            for o in task.spec.signature.outputs]
    for _ in range(CALLS):
        kernel(case.inputs, outs, case.params)
    torch.cuda.synchronize()


if __name__ == "__main__":
    _target(sys.argv[1])
