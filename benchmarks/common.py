"""Helpers for the benchmark scripts: where figures go, and what machine made them."""

from __future__ import annotations

import contextlib
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    info = {"python": sys.version.split()[0], "host": platform.node(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["cuda"] = torch.version.cuda
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    with contextlib.suppress(OSError):
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=20).stdout.strip()
    return info


def write(name: str, figures: dict, command: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"command": command, "machine": machine(), "figures": figures}, indent=2) + "\n")
    print(f"wrote {path}")
    return path
