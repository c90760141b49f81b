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

A retired GPU is probed again after a cool-down (REPROBE_AFTER_S, doubled after each probe): `probe_gpu`
asks the driver's listing for it and runs a tiny job on it, holding its lease. One that passes returns to
rotation; each GPU gets at most MAX_PROBES probes in a Placer's life, so a truly broken one costs a few
probes and then stays out. Every retirement, probe and return is logged (logger `crucible.placement`) and
kept in `Placer.log`.

Kinds of GPU (`route`): a backend's GPUs are one vendor's (cuda: NVIDIA, rocm: AMD). A task's `[hardware]`
(toolkit/task.py) picks the kind its evaluations go to: `vendor = "amd"` only to an AMD GPU; where the run has
none, `fallback = "hip-on-cuda"` lets a HIP task run on an NVIDIA GPU (the Placement records `hip_on_cuda`
and says why), and without a fallback the score is `infra_error` naming the hardware the task needs. A task
that asks for nothing goes where it always went: the run's backend, a HIP task to an AMD GPU where the run
has one (else HIP on CUDA, recorded the same way).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from pydantic import BaseModel, ConfigDict

from crucible.toolkit.devices import LeaseCancelled, gpu_lease, lease_free
from crucible.toolkit.evaluation import Backend
from crucible.toolkit.results import EVALUATOR_VERSION, Evaluation
from crucible.toolkit.task import TaskSpec

from .models import Placement, Score

MAX_ATTEMPTS = 3
"""Evaluations per scoring at most: the first and two retries on other GPUs after device faults."""

DEVICE_FAULT = re.compile(
    r"xid|fallen off the bus|gpu is lost|lost (?:the )?(?:cuda )?context|context is destroyed|"
    r"cuda_error_(?:ecc_uncorrectable|launch_failed|illegal_state|not_initialized|no_device|devices_unavailable)|"
    r"uncorrectable ecc|no cuda-capable device|cudaerrordevicesunavailable|hiperrornodevice|"
    r"unspecified launch failure|unknown error.*cuda|cuda.*unknown error", re.IGNORECASE)
"""What a judge or worker says when the GPU itself failed (the driver's words for it)."""

REPROBE_AFTER_S = 300.0
"""How long a retired GPU rests before its first probe; each probe after that waits twice as long."""
MAX_PROBES = 3
"""Probes per GPU at most in a Placer's life: a GPU that fails them all (or keeps failing after it came
back) stays out of rotation, having cost at most this many small jobs."""
PROBE_TIMEOUT_S = 120.0
"""A probe's tiny job (Python, torch, one kernel) must end within this; waiting for the GPU's lease too."""

VENDOR: dict[str, str] = {"cuda": "nvidia", "rocm": "amd"}
"""A GPU backend's vendor: each backend's GPUs are one vendor's."""
BACKEND_OF: dict[str, Backend] = {"nvidia": "cuda", "amd": "rocm"}
VENDOR_NAME = {"nvidia": "NVIDIA", "amd": "AMD"}

log = logging.getLogger("crucible.placement")


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


# ---------------------------------------------------------------- which kind of GPU a task goes to


class Route(BaseModel):
    """Where a task's final scoring goes: a backend (one vendor's GPUs), or a refusal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Backend | None
    """None: refused (`refusal` says why)."""
    hip_on_cuda: bool | None = None
    """For a HIP task: whether it runs as HIP on CUDA (True) or on an AMD GPU (False); None otherwise."""
    note: str = ""
    """For the Placement's note: a fallback kind of hardware and why."""
    refusal: str = ""


def route(spec: TaskSpec, run_backend: Backend, kinds: Iterable[Backend], where: str = "this run") -> Route:
    """The backend `spec`'s final scoring goes to, given the run's backend and the GPU backends that have
    GPUs (`kinds`); `where` names the pool in messages ("this run", "the cluster")."""
    kinds = set(kinds)
    hw, language = spec.hardware, spec.language

    def to(backend: Backend, note: str = "") -> Route:
        on_gpu = language == "hip" and backend in VENDOR  # the cpu backend runs no HIP kernel at all
        return Route(backend=backend, hip_on_cuda=(backend == "cuda") if on_gpu else None, note=note)

    if hw.vendor == "any":
        if language == "hip" and "rocm" in kinds:
            return to("rocm")
        if language == "cuda" and "cuda" in kinds:
            return to("cuda")
        return to(run_backend, f"HIP on CUDA: {where} has no AMD GPU"
                  if language == "hip" and run_backend == "cuda" else "")
    wanted = BACKEND_OF[hw.vendor]
    if wanted in kinds:
        return to(wanted)
    if hw.fallback == "hip-on-cuda" and "cuda" in kinds:
        return to("cuda", f'HIP on CUDA by the task\'s fallback: [hardware] vendor = "amd", and {where} has no '
                          'AMD GPU (fallback = "hip-on-cuda" allows NVIDIA)')
    has = ", ".join(f"{VENDOR_NAME[VENDOR[k]]} ({k})" for k in sorted(kinds) if k in VENDOR) or "no GPU"
    fallback = ('; its fallback, HIP on CUDA, needs an NVIDIA GPU and there is none either' if hw.fallback
                else "; the task allows no fallback")
    return Route(backend=None, refusal=(
        f"not scored: {spec.id} needs an {VENDOR_NAME[hw.vendor]} GPU ([hardware] vendor = \"{hw.vendor}\") and "
        f"{where} has {has}{fallback}. This says nothing about the submission: score the run again where "
        f"such a GPU is (`crucible score RUN --ray ADDRESS` with one in the cluster, or on a host that has one)"))


# ---------------------------------------------------------------- placing evaluations


Probe = Callable[[Backend, "Device"], str | None]
"""A health probe: None when the GPU is fit to take evaluations again, else why not. Raises LeaseCancelled
when it could not get at the GPU (another process held it throughout): that says nothing either way."""

PROBE_JOB = ("import torch\n"
             "x = torch.ones(1 << 20, device='cuda')\n"
             "torch.cuda.synchronize()\n"
             "assert int((x + x).sum().item()) == 2 << 20, 'wrong sum'\n"
             "print(torch.cuda.get_device_name(0))\n")
"""The tiny job: a context, an allocation, one kernel and a copy back on the GPU (torch.cuda is HIP on ROCm)."""


def probe_gpu(backend: Backend, device: Device, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Whether a retired GPU is fit again: the driver lists it, and a tiny job runs right on it (holding its
    lease, as an evaluation would). None: fit; else what failed."""
    try:
        listed = {d.index for d in list_gpus(backend)}
    except DeviceError as exc:
        return str(exc)
    if device.index not in listed:
        return f"the driver no longer lists GPU {device.index}"
    visible = "CUDA_VISIBLE_DEVICES" if backend == "cuda" else "HIP_VISIBLE_DEVICES"
    env = {**os.environ, visible: str(device.index)}
    cancel = threading.Event()
    timer = threading.Timer(timeout_s, cancel.set)
    timer.start()
    try:
        with gpu_lease(backend, device.index, cancel):  # raises LeaseCancelled: another process held it
            proc = subprocess.run([sys.executable, "-c", PROBE_JOB], capture_output=True, text=True, env=env,
                                  timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"the probe's tiny job took more than {timeout_s:g} s"
    except OSError as exc:
        return f"the probe's tiny job could not start: {exc}"
    finally:
        timer.cancel()
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"the probe's tiny job failed: {tail[:200]}"
    return None


class Placer:
    """Hands out this host's healthy GPUs, one evaluation per GPU at a time, across a run's threads. A
    retired GPU is probed again after a cool-down and returns to rotation when it passes (module docstring)."""

    def __init__(self, backend: Backend, devices: list[Device], *, max_attempts: int = MAX_ATTEMPTS,
                 probe: Probe | None = probe_gpu, reprobe_after_s: float = REPROBE_AFTER_S,
                 max_probes: int = MAX_PROBES, clock: Callable[[], float] = time.monotonic) -> None:
        if backend != "cpu" and not devices:
            raise DeviceError(f"the {backend} backend needs at least one GPU to place evaluations on")
        self.backend, self.devices, self.max_attempts = backend, list(devices), max_attempts
        self.retired: dict[int, str] = {}
        """GPU index -> why it left rotation."""
        self.log: list[str] = []
        """What happened to GPUs out of rotation: each retirement, probe and return, in order."""
        self._busy: set[int] = set()
        self._uses = {d.index: 0 for d in self.devices}
        """Evaluations placed per GPU: the least used free one goes next, so every GPU's judge stays warm
        and a failing GPU shows itself early."""
        self._probe, self._reprobe_after_s, self._max_probes, self._clock = probe, reprobe_after_s, max_probes, clock
        self._probes = {d.index: 0 for d in self.devices}
        """Probes spent per GPU (in this Placer's life, returns included)."""
        self._due: dict[int, float] = {}
        """Retired GPU -> when its next probe is due (clock time); absent: out for good."""
        self._probing: set[int] = set()
        self._changed = threading.Condition()

    def healthy(self) -> list[Device]:
        with self._changed:
            return [d for d in self.devices if d.index not in self.retired]

    def _record(self, line: str) -> None:
        self.log.append(line)
        log.warning("%s", line)

    def retire(self, device: Device, why: str) -> None:
        with self._changed:
            self.retired[device.index] = why
            self._schedule(device.index, why)
            self._changed.notify_all()

    def _schedule(self, index: int, why: str) -> None:
        """Set the retired GPU's next probe (after the cool-down, doubled per probe spent), or none."""
        spent = self._probes.get(index, 0)
        if self._probe is None or spent >= self._max_probes:
            self._due.pop(index, None)
            self._record(f"GPU {index} out of rotation for good ({spent} probe(s) spent): {why}")
            return
        wait = self._reprobe_after_s * 2 ** spent
        self._due[index] = self._clock() + wait
        self._record(f"GPU {index} out of rotation: {why}; probed again in {wait:g} s")

    def _due_now(self) -> list[int]:
        now = self._clock()
        return [i for i, at in self._due.items() if at <= now and i not in self._probing]

    def reprobe(self, indices: list[int] | None = None) -> list[int]:
        """Probe the retired GPUs whose cool-down is over (or `indices`, claimed by the caller) in this thread;
        return those that passed and are back in rotation."""
        with self._changed:
            if indices is None:
                indices = self._due_now()
                self._probing.update(indices)
        back = []
        for index in indices:
            device = next(d for d in self.devices if d.index == index)
            try:
                why = self._probe(self.backend, device) if self._probe is not None else "no probe"
            except LeaseCancelled:
                with self._changed:  # another process held it throughout: nothing learnt, no probe spent
                    self._probing.discard(index)
                    self._due[index] = self._clock() + self._reprobe_after_s
                    self._record(f"GPU {index}: probe put off, another process held the GPU")
                    self._changed.notify_all()
                continue
            except Exception as exc:  # a bug of ours in a probe must not stop the run's scoring
                why = f"the probe raised {type(exc).__name__}: {exc}"
            with self._changed:
                self._probing.discard(index)
                self._probes[index] = self._probes.get(index, 0) + 1
                n = self._probes[index]
                if why is None:
                    previous = self.retired.pop(index, "")
                    self._due.pop(index, None)
                    back.append(index)
                    self._record(f"GPU {index} back in rotation: probe {n} of {self._max_probes} passed "
                                 f"(it had left after: {previous})")
                else:
                    self._record(f"GPU {index} failed probe {n} of {self._max_probes}: {why}")
                    self._schedule(index, self.retired.get(index, why))
                self._changed.notify_all()
        return back

    def _start_probes(self) -> None:
        """Probe the GPUs whose cool-down is over, in a thread of their own (called holding the lock)."""
        due = self._due_now()
        if due:
            self._probing.update(due)
            threading.Thread(target=self.reprobe, args=(due,), name="crucible-gpu-probe", daemon=True).start()

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
        every GPU is out of rotation (and no probe is under way that could bring one back), LeaseCancelled
        when `cancel` is set while waiting."""
        if self.backend == "cpu":
            yield None
            return
        with self._changed:
            while True:
                self._start_probes()
                if len(self.retired) == len(self.devices):
                    if not self._probing:
                        raise DeviceError("every GPU is out of rotation: " + "; ".join(
                            f"GPU {i}: {why}{self._when(i)}" for i, why in sorted(self.retired.items())))
                    # a probe is under way: it may bring one back
                else:
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

    def _when(self, index: int) -> str:
        at = self._due.get(index)
        return " (for good)" if at is None else f" (probed again in {max(0.0, at - self._clock()):.0f} s)"


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
