"""`crucible calibrate`: measure the device's ceilings (copy bandwidth, matrix rates) for the roofline.

Datasheet figures are leads; what large memory streams and a large matrix product reach on this device,
timed by the same timer as the candidates, is the ceiling the peak fractions are computed against. The
memory ceiling is the faster of a device-to-device copy and a read-only reduction: on HBM a pure read
stream beats a copy by a few percent, and a reduction kernel measured against the copy alone would show a
peak fraction above 1.
The figures are written to `<cache>/ceilings.json` and preferred over the built-in table.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .hardware import Ceilings, measured_ceilings_path

MATMUL_N = 8192
COPY_BYTES = 4 << 30


def run_calibration(payload: dict, progress: Callable[[dict], None]) -> dict:
    """Worker job "calibrate" (needs a GPU)."""
    import torch

    from .timing import CAREFUL, time_subjects

    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    progress({"stage": "bandwidth"})
    copy_bw, read_bw = measure_bandwidth(device, COPY_BYTES)
    bandwidth = max(copy_bw, read_bw)
    rates = {}
    for dtype_name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16), ("float32", torch.float32)):
        progress({"stage": "matmul", "dtype": dtype_name})
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 here, as the tasks' tolerances do
        a = torch.randn(MATMUL_N, MATMUL_N, device=device).to(dtype)
        b = torch.randn(MATMUL_N, MATMUL_N, device=device).to(dtype)
        c = torch.empty(MATMUL_N, MATMUL_N, device=device, dtype=dtype)
        stats, _ = time_subjects({"mm": lambda i, a=a, b=b, c=c: torch.mm(a, b, out=c)}, 1, CAREFUL, device)
        rates[dtype_name] = 2 * MATMUL_N**3 / (stats["mm"].median_us * 1e-6)
        del a, b, c
    rates["float64"] = rates["float32"] / 2  # a lead: fp64 is not on any task's hot path yet
    return Ceilings(name=name, memory_bytes_per_s=bandwidth, flops_per_s=rates,
                    source=f"measured by `crucible calibrate`: {COPY_BYTES >> 30} GiB copy {copy_bw / 1e12:.2f} TB/s, "
                           f"{COPY_BYTES >> 30} GiB read (sum) {read_bw / 1e12:.2f} TB/s, {MATMUL_N}^3 matmuls "
                           "(random data, median of the careful timer)").model_dump()


def measure_bandwidth(device: Any, nbytes: int) -> tuple[float, float]:
    """Bytes per second of a copy (`nbytes` read and written) and of a read-only sum over `nbytes`."""
    import torch

    from .timing import CAREFUL, time_subjects

    n = nbytes // 2 // 4
    src, dst = torch.randn(n, device=device), torch.empty(n, device=device)
    stats, _ = time_subjects({"copy": lambda i, src=src, dst=dst: dst.copy_(src)}, 1, CAREFUL, device)
    copy_bw = 2 * n * 4 / (stats["copy"].median_us * 1e-6)
    del src, dst
    big, total = torch.randn(2 * n, device=device), torch.empty((), device=device)
    read = {"read": lambda i, big=big, total=total: torch.sum(big, dim=0, out=total)}
    stats, _ = time_subjects(read, 1, CAREFUL, device)
    return copy_bw, 2 * n * 4 / (stats["read"].median_us * 1e-6)


def calibrate(gpu: int = 0) -> Ceilings:
    """Measure in a worker and store the result; returns what was measured."""
    from .worker import WorkerLimits, run_job

    with tempfile.TemporaryDirectory(prefix="crucible-calibrate-") as scratch:
        outcome = run_job("calibrate", {}, limits=WorkerLimits(timeout_s=600), backend="cuda", gpu=gpu,
                          scratch=Path(scratch))
    if outcome.status != "ok" or outcome.result is None:
        raise RuntimeError(f"calibration failed: {outcome.message}\n{outcome.stderr_tail[-2000:]}")
    ceilings = Ceilings.model_validate(outcome.result)
    path = measured_ceilings_path()
    known = json.loads(path.read_text()) if path.is_file() else {}
    known[ceilings.name] = ceilings.model_dump()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(known, indent=2) + "\n")
    return ceilings
