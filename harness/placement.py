"""Final scoring on every GPU of a host: each evaluation on a free, healthy GPU, one at a time per GPU.

    Placer(backend, devices)                  devices: `--gpus 0,1,...`, else every GPU the host lists
      attempt 1: slot() ──▶ a healthy GPU that no evaluation of this process holds, preferring one whose
                 lease (toolkit/devices.py) no other process holds ──▶ evaluate on it (the engine takes
                 the lease, so timing stays one evaluation per GPU across processes too)
      an `infra` evaluation whose message names a device fault (lost context, Xid, fallen off the bus):
                 retire() takes that GPU out of rotation for the Placer's life ──▶ attempt 2 on another GPU,
                 ... up to MAX_ATTEMPTS; the score is then infra_error (never the agent's failure)
      ──▶ Placed: the verdict and where it ran (Placement: gpu, gpu_name, attempts, note)

Only `infra` evaluations can retire a GPU: that status comes from the engine and the judge, never from
the candidate's own words, so a candidate that prints "Xid 79" cannot turn its failure into a retry. On the
cpu backend there is nothing to place: every evaluation runs at once, as before.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import BaseModel, ConfigDict

from crucible.toolkit.devices import LeaseCancelled, lease_free
from crucible.toolkit.evaluation import Backend
from crucible.toolkit.results import EVALUATOR_VERSION, Evaluation

from .models import Placement, Score

MAX_ATTEMPTS = 3
"""Evaluations per scoring at most: the first and two retries on other GPUs after device faults."""

DEVICE_FAULT = re.compile(
    r"xid|fallen off the bus|gpu is lost|lost (?:the )?(?:cuda )?context|context is destroyed|"
    r"cuda_error_(?:ecc_uncorrectable|launch_failed|illegal_state|not_initialized|no_device|devices_unavailable)|"
    r"uncorrectable ecc|no cuda-capable device|cudaerrordevicesunavailable|hiperrornodevice|"
    r"unspecified launch failure|unknown error.*cuda|cuda.*unknown error", re.IGNORECASE)
"""What a judge or worker says when the GPU itself failed (the driver's words for it)."""


class DeviceError(Exception):
    """The GPUs asked for cannot be used (not on this host, none left in rotation); the message says why."""


class Device(BaseModel):
    """One GPU of this host."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    """Its index as the driver counts them (what CUDA_VISIBLE_DEVICES names)."""
    name: str


class Placed(BaseModel):
    """A final scoring's result and where it ran."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    score: Score
    evaluation: Evaluation | None
    placement: Placement


# ---------------------------------------------------------------- the GPUs of this host


def list_gpus(backend: Backend) -> list[Device]:
    """The GPUs this host's driver lists for `backend` (none on the cpu backend), as visible to this
    process (`CUDA_VISIBLE_DEVICES` / `ROCR_VISIBLE_DEVICES` narrow them)."""
    if backend == "cpu":
        return []
    if backend == "cuda":
        command = ["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"]
        visible_env = "CUDA_VISIBLE_DEVICES"
    else:
        command = ["rocm-smi", "--showproductname", "--csv"]
        visible_env = "ROCR_VISIBLE_DEVICES"
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise DeviceError(f"cannot list the {backend} GPUs of this host ({command[0]}: {exc}); "
                          "pass them with --gpus 0,1,...") from None
    devices = parse_gpu_listing(backend, out)
    visible = os.environ.get(visible_env)
    if visible is not None and visible.strip() and all(v.strip().isdigit() for v in visible.split(",")):
        keep = [int(v) for v in visible.split(",")]
        devices = [d for d in devices if d.index in keep]
    return devices


def parse_gpu_listing(backend: Backend, text: str) -> list[Device]:
    """nvidia-smi's `index, name` lines, or rocm-smi's CSV (`card0,...,Card series,...`)."""
    devices = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if backend == "cuda" and len(cells) >= 2 and cells[0].isdigit():
            devices.append(Device(index=int(cells[0]), name=", ".join(cells[1:])))
        elif backend == "rocm" and cells and cells[0].startswith("card") and cells[0][4:].isdigit():
            devices.append(Device(index=int(cells[0][4:]), name=next((c for c in cells[1:] if c), "AMD GPU")))
    return devices


def parse_gpus(text: str) -> list[int]:
    """`--gpus 0,1,3` -> [0, 1, 3]; raises ValueError with what is wrong."""
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"--gpus takes GPU indices separated by commas, such as 0,1,3; got {text!r}")
    indices = [int(p) for p in parts]
    if len(set(indices)) != len(indices):
        raise ValueError(f"--gpus names a GPU twice: {text!r}")
    return indices


def choose_devices(backend: Backend, wanted: list[int] | None,
                   listed: Callable[[Backend], list[Device]] = list_gpus) -> list[Device]:
    """The devices final scoring may use: `wanted` (all of them must be on this host), or all listed."""
    if backend == "cpu":
        if wanted:
            raise DeviceError("--gpus needs a GPU backend; this run is on the cpu backend (no GPU found)")
        return []
    try:
        devices = listed(backend)
    except DeviceError:
        if not wanted:
            raise
        # no listing (a driver without its tool): the GPUs asked for, by index
        return [Device(index=g, name=f"{backend} GPU {g}") for g in wanted]
    if not devices:
        raise DeviceError(f"the {backend} backend found no GPU on this host; check the driver "
                          "(nvidia-smi / rocm-smi) or run on the cpu backend")
    if wanted is None:
        return devices
    by_index = {d.index: d for d in devices}
    missing = [g for g in wanted if g not in by_index]
    if missing:
        raise DeviceError(f"--gpus names {missing}, which this host does not have; it has "
                          + ", ".join(f"{d.index} ({d.name})" for d in devices))
    return [by_index[g] for g in wanted]


def is_device_fault(ev: Evaluation | None) -> bool:
    """An evaluation the GPU failed under: status `infra` (the engine's or judge's word) naming a fault."""
    return ev is not None and ev.status == "infra" and DEVICE_FAULT.search(ev.message) is not None


# ---------------------------------------------------------------- placing evaluations


class Placer:
    """Hands out this host's healthy GPUs, one evaluation per GPU at a time, across a run's threads."""

    def __init__(self, backend: Backend, devices: list[Device], *, max_attempts: int = MAX_ATTEMPTS) -> None:
        if backend != "cpu" and not devices:
            raise DeviceError(f"the {backend} backend needs at least one GPU to place evaluations on")
        self.backend, self.devices, self.max_attempts = backend, list(devices), max_attempts
        self.retired: dict[int, str] = {}
        """GPU index -> why it left rotation."""
        self._busy: set[int] = set()
        self._uses = {d.index: 0 for d in self.devices}
        """Evaluations placed per GPU: the least used free one goes next, so every GPU's judge stays warm
        and a failing GPU shows itself early."""
        self._changed = threading.Condition()

    def healthy(self) -> list[Device]:
        with self._changed:
            return [d for d in self.devices if d.index not in self.retired]

    def retire(self, device: Device, why: str) -> None:
        with self._changed:
            self.retired[device.index] = why
            self._changed.notify_all()

    def _pick(self, avoid: set[int]) -> Device | None:
        free = sorted((d for d in self.devices if d.index not in self.retired and d.index not in self._busy),
                      key=lambda d: self._uses[d.index])
        fresh = [d for d in free if d.index not in avoid] or free
        idle = [d for d in fresh if lease_free(self.backend, d.index)]  # not held by another process
        return (idle or fresh or [None])[0]

    @contextmanager
    def slot(self, cancel: threading.Event | None = None, avoid: set[int] | None = None) -> Iterator[Device | None]:
        """A free healthy GPU (None on the cpu backend), held by this process until the block ends;
        prefers GPUs not in `avoid` (those an evaluation already failed on). Raises DeviceError when
        every GPU is out of rotation, LeaseCancelled when `cancel` is set while waiting."""
        if self.backend == "cpu":
            yield None
            return
        with self._changed:
            while True:
                if len(self.retired) == len(self.devices):
                    raise DeviceError("every GPU is out of rotation: " + "; ".join(
                        f"GPU {i}: {why}" for i, why in sorted(self.retired.items())))
                device = self._pick(avoid or set())
                if device is not None:
                    self._busy.add(device.index)
                    self._uses[device.index] += 1
                    break
                if cancel is not None and cancel.is_set():
                    raise LeaseCancelled("cancelled while waiting for a free GPU")
                self._changed.wait(0.05)
        try:
            yield device
        finally:
            with self._changed:
                self._busy.discard(device.index)
                self._changed.notify_all()


Attempt = Callable[[Device | None], tuple[Score, Evaluation | None]]
"""Score once on the given GPU (None: the cpu backend)."""


def score_placed(placer: Placer, attempt: Attempt, cancel: threading.Event | None = None) -> Placed:
    """Run `attempt` on a free GPU; where the GPU fails under it, retire the GPU and try another, up to
    the placer's cap. The verdict is the last attempt's (infra_error when the last GPU failed too)."""
    tried: set[int] = set()
    notes: list[str] = []
    for n in range(1, placer.max_attempts + 1):
        try:
            with placer.slot(cancel, avoid=tried) as device:
                score, ev = attempt(device)
        except (DeviceError, LeaseCancelled) as exc:
            return Placed(score=Score(verdict="infra_error", message=f"no GPU to score on: {exc}",
                                      evaluator_version=EVALUATOR_VERSION), evaluation=None,
                          placement=Placement(attempts=n - 1, note="; ".join([*notes, str(exc)])))
        seen = ev.device.name if ev is not None and ev.device is not None else None
        if device is None:
            return Placed(score=score, evaluation=ev, placement=Placement(gpu_name=seen, attempts=n))
        if is_device_fault(ev) and ev is not None:
            tried.add(device.index)
            placer.retire(device, ev.message.strip().splitlines()[-1][:200] if ev.message.strip() else "infra")
            notes.append(f"GPU {device.index} ({device.name}) failed and left rotation: "
                         f"{placer.retired[device.index]}")
            if n < placer.max_attempts:
                continue
            notes.append(f"gave up after {n} attempts")
        return Placed(score=score, evaluation=ev, placement=Placement(
            gpu=device.index, gpu_name=seen or device.name, attempts=n, note="; ".join(notes)))
    raise AssertionError("unreachable: the last attempt returns")
