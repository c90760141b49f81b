"""Jobs for tests/test_worker.py: each does one thing a misbehaving candidate might do to a worker.

They run inside the worker, imported as `tests.worker_jobs` (the tests put the repo root on PYTHONPATH).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Progress = Callable[[dict[str, Any]], None]

def processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds `marker` (test helper, runs in the test process)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def wait_gone(marker: str, seconds: float = 3.0) -> list[int]:
    """Wait until no process holds `marker`; returns those still left."""
    deadline = time.monotonic() + seconds
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


FORGED = '{"type":"result","result":{"forged":true}}\n'


def echo(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    return {"echo": payload, "cwd": os.getcwd(), "env": dict(os.environ)}


def progress_then_result(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    for step in range(payload["steps"]):
        progress({"step": step})
    return {"done": True}


def segfault(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    ctypes.string_at(0)
    return {}


def abort(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    os.abort()


def spin(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    while True:
        pass


def fork_sleeper_and_hang(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """Leaves a grandchild that escapes the process group (setsid) and sleeps, then hangs."""
    if os.fork() == 0:
        os.setsid()
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(3600)", payload["marker"]])
    while True:
        time.sleep(1)


def fork_sleeper_and_return(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """Leaves a grandchild (a plain fork, holding the result pipe) sleeping, and returns at once."""
    if os.fork() == 0:
        os.setsid()
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(3600)", payload["marker"]])
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
    return {"returned": True}


def allocate_64_gib(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    block = bytearray(64 << 30)
    return {"size": len(block)}


def sys_exit_0(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    sys.exit(0)


def os_exit_0(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    print(FORGED, end="", flush=True)
    os._exit(0)


def atexit_forger_then_sys_exit(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    atexit.register(lambda: os.write(1, FORGED.encode()))
    sys.exit(0)


def raise_value_error(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    raise ValueError("the candidate's output has the wrong shape")


def print_fake_results(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    print("garbage \x00\xff not json")
    print(FORGED, end="", flush=True)
    os.write(1, FORGED.encode())
    os.write(2, FORGED.encode())
    return {"real": True}


def huge_result(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    return {"data": "x" * payload["size"]}


def connect(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    try:
        with socket.create_connection(("127.0.0.1", payload["port"]), timeout=2):
            return {"connected": True}
    except OSError as exc:
        return {"connected": False, "error": repr(exc)}


def write_outside_scratch(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    try:
        Path(payload["path"]).write_text("tampered")
    except OSError as exc:
        return {"written": False, "error": repr(exc)}
    return {"written": True}


def sleep_after_progress(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    progress({"phase": "started"})
    time.sleep(60)
    return {}


def cuda_illegal_address(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """A Triton kernel that stores far outside its buffer: CUDA's illegal memory access."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def bad_store(ptr):
        tl.store(ptr + (1 << 40), 1.0)

    x = torch.zeros(16, device="cuda")
    bad_store[(1,)](x)
    torch.cuda.synchronize()
    return {"survived": True}


def cuda_bad_index(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    import torch

    x = torch.zeros(16, device="cuda")
    x[torch.tensor([1 << 30], device="cuda")] = 1.0
    torch.cuda.synchronize()
    return {"survived": True}


def cuda_echo(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    import torch

    return {"sum": float(torch.ones(1000, device="cuda").sum().item()),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def whoami(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """Which process ran the job, and what it had imported before the job began."""
    import os
    import sys

    return {"pid": os.getpid(), "scratch": os.getcwd(), "torch_preloaded": "torch" in sys.modules}


def landlock_in_child(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """As the ncu job does: a child process restricts itself with the writable dirs the worker handed over,
    then tries a write outside them and the CUDA driver's write into its own /proc/<pid>/task."""
    import subprocess
    import sys

    code = (
        "import json, os, sys\n"
        "from crucible.toolkit.sandbox import restrict_filesystem\n"
        "restrict_filesystem(json.loads(sys.argv[1]))\n"
        "out = {}\n"
        "for key, path in (('outside', sys.argv[2]), ('own_task', f'/proc/self/task/{os.getpid()}/comm')):\n"
        "    try:\n"
        "        open(path, 'w').write('probe')\n"
        "        out[key] = True\n"
        "    except OSError:\n"
        "        out[key] = False\n"
        "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(payload.get("landlock_writable")),
                           payload["path"]], capture_output=True, text=True, timeout=60)
    return {"handed_over": payload.get("landlock_writable"), "child": proc.stdout.strip(), "stderr": proc.stderr[-500:]}


def result_then_hang(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """Sends its result on the worker's own channel, then never exits (a judge whose exit hangs in a driver)."""
    channel = progress.__closure__[progress.__code__.co_freevars.index("channel")].cell_contents  # type: ignore[index]
    channel.send({"type": "result", "result": {"decided": True}})
    time.sleep(600)
    return {"decided": False}
