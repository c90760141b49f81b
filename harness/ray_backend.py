"""Final scoring on a Ray cluster: one evaluator actor per GPU, its judge started ahead.

    RayScoring.connect(address, backend)      address: a cluster's (`auto`, `ray://...`, `HOST:PORT`), or
                                              `local` / `local:N` (a cluster on this host, N GPUs declared)
      ──▶ per GPU of each node: an Evaluator actor (num_gpus=1, pinned to its node), which keeps a judge
          started ahead on that GPU; agent sessions stay on the head (they need no GPU)
      score(task, submission) ──▶ an idle evaluator of the right kind ◀── EvalOrder (JSON): the task id and
          the digest of the head's copy of the task and evaluator, the submission's files
            evaluator: refuses another copy of the task or evaluator (infra_error), writes the files to a
            private folder, score_session on its GPU (the same verdict, the same defences) ──▶ EvalVerdict
      an evaluator that dies (its node lost) or whose GPU fails ──▶ out of rotation, the order runs on
          another, up to placement.MAX_ATTEMPTS; the score says where it ran

Kinds of GPU: a node may declare its GPUs' vendor as a Ray custom resource (`ray start --num-gpus=8
--resources='{"gpu_vendor_amd": 8}'`; a `local` cluster declares its own GPUs'); each evaluator on it takes
one unit of it beside its GPU, so Ray's own accounting (`ray status`) shows the free evaluators of each kind.
Each evaluator reports its backend (cuda, rocm, or cpu where a node has no GPU driver), its vendor resource
and its device's name; the head refuses a node whose declared vendor is not what its evaluator found. An
order goes to an evaluator of the kind its task needs (placement.route, the task's `[hardware]`): an AMD-only
task to an AMD evaluator, else HIP on CUDA where its fallback allows (recorded in the Placement), else an
infra_error naming the hardware; a task that asks for nothing goes to the run's backend, a HIP task to an AMD
evaluator where the cluster has one.

Ray is an optional extra (`pip install 'kernel-crucible[ray]'`); nothing else imports this module.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from crucible.toolkit.evaluation import Backend, detect_backend
from crucible.toolkit.results import EVALUATOR_VERSION, Evaluation
from crucible.toolkit.task import Task, find_task

from .models import Placement, Score
from .placement import BACKEND_OF, MAX_ATTEMPTS, VENDOR, Placed, Route, is_device_fault, list_gpus, route

VENDOR_RESOURCE = "gpu_vendor_"
"""A node's custom resource `gpu_vendor_<vendor>` (nvidia, amd): how many of its GPUs are that vendor's."""


def vendor_resource(vendor: str) -> str:
    return f"{VENDOR_RESOURCE}{vendor}"

FORWARDED_ENV = ("CRUCIBLE_TASKS", "CRUCIBLE_BACKEND", "CRUCIBLE_CACHE", "CRUCIBLE_ARCH")
"""What an evaluator takes from the head's environment (the suite's folder, a forced backend)."""

MAX_SUBMISSION_BYTES = 4 << 20


class RayUnavailable(Exception):
    """Ray is not installed, or the cluster cannot be used; the message says what to do."""


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("scoring on a Ray cluster needs Ray: pip install 'kernel-crucible[ray]'") from None
    return ray


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvalOrder(Frozen):
    """What the head sends an evaluator: enough to score one submission anywhere in the cluster."""

    id: str
    task: str
    task_digest: str
    """The head's digest of the task folder: an evaluator with another copy of the suite refuses the order."""
    evaluator_digest: str
    files: dict[str, str]
    """The frozen submission's source files, by path inside it."""
    expected_hash: str | None = None
    timeout_s: float | None = None
    """Overrides the task's time limit (the reward service's per-request limit)."""


class EvaluatorInfo(Frozen):
    """What an evaluator says about itself once its judge is started."""

    backend: Backend
    gpu: int | None
    """Its GPU's index on its node (Ray's assignment); None where Ray gave it none."""
    gpu_name: str
    host: str
    evaluator_digest: str
    """The digest of the engine it loaded (harness/session.py evaluator_digest), taken when it started."""
    vendor: str | None = None
    """The vendor resource Ray gave it (`gpu_vendor_amd` -> amd): its node's declaration of its GPU's
    kind; None where the node declares none (its backend then says the kind)."""

    @property
    def kind(self) -> str:
        """The backend the head routes by: a GPU backend's own; on an evaluator that sees no GPU (the cpu
        backend, as the tests run) its declared vendor's, so routing can be tried without GPUs."""
        if self.backend == "cpu" and self.vendor in BACKEND_OF:
            return BACKEND_OF[self.vendor]
        return self.backend

    def mismatch(self) -> str | None:
        """Where its node declares one vendor and it found the other's GPU: what is wrong, else None."""
        if self.vendor is not None and self.backend in VENDOR and VENDOR[self.backend] != self.vendor:
            return (f"{self.host} GPU {self.gpu} is declared {vendor_resource(self.vendor)} but its evaluator "
                    f"found a {self.backend} GPU ({self.gpu_name})")
        return None


class EvalVerdict(Frozen):
    score: Score
    evaluation: Evaluation | None
    placement: Placement


def submission_files(folder: Path) -> dict[str, str]:
    """The frozen submission's files as text (sources only: a submission is the agent's source files)."""
    files, total = {}, 0
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            text = path.read_text(errors="replace")
            total += len(text)
            if total > MAX_SUBMISSION_BYTES:
                raise ValueError(f"the submission at {folder} holds more than {MAX_SUBMISSION_BYTES} bytes")
            files[str(path.relative_to(folder))] = text
    return files


def write_files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        target = (folder / name).resolve()
        if not target.is_relative_to(folder.resolve()):
            raise ValueError(f"a submission file escapes its folder: {name!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


# ---------------------------------------------------------------- the evaluator (runs in a Ray actor)


class Evaluator:
    """One GPU's evaluator: a judge pool started ahead on it; scores one order at a time (a second
    thread only takes `cancel`)."""

    def __init__(self, env: dict[str, str]) -> None:
        os.environ.update(env)
        from .scoring import ScoringPools
        from .session import evaluator_digest

        ray = require_ray()
        ids = ray.get_gpu_ids()
        self.backend: Backend = detect_backend()
        self.gpu = int(ids[0]) if ids else None
        name = "cpu (Triton interpreter)"
        if self.backend != "cpu":
            listed = {d.index: d.name for d in list_gpus(self.backend)} if self.gpu is not None else {}
            name = listed.get(self.gpu or 0, f"{self.backend} GPU")
        assigned = ray.get_runtime_context().get_assigned_resources()
        vendor = next((k.removeprefix(VENDOR_RESOURCE) for k in assigned if k.startswith(VENDOR_RESOURCE)), None)
        self.info = EvaluatorInfo(backend=self.backend, gpu=self.gpu, gpu_name=name, host=socket.gethostname(),
                                  evaluator_digest=evaluator_digest(), vendor=vendor)
        self.pools = ScoringPools()
        self.pools.get(self.backend, self._engine_gpu())  # start its judge now, not on the first order
        self._cancels: dict[str, threading.Event] = {}

    def _engine_gpu(self) -> int | None:
        return self.gpu if self.backend != "cpu" else None

    def ready(self) -> dict:
        return self.info.model_dump(mode="json")

    def ping(self, order: dict) -> dict:
        """The round trip without the evaluation (the benchmark of Ray's own cost per order)."""
        parsed = EvalOrder.model_validate(order)
        return EvalVerdict(score=Score(verdict="no_submission", message=parsed.id), evaluation=None,
                           placement=Placement(gpu=self.gpu, gpu_name=self.info.gpu_name,
                                               host=self.info.host)).model_dump(mode="json")

    def cancel(self, order_id: str) -> bool:
        event = self._cancels.get(order_id)
        if event is not None:
            event.set()
        return event is not None

    def score(self, order: dict) -> dict:
        from .scoring import score_session
        from .session import task_digest

        parsed = EvalOrder.model_validate(order)
        placement = Placement(gpu=self.gpu, gpu_name=self.info.gpu_name, host=self.info.host)

        def refuse(message: str) -> dict:
            return EvalVerdict(score=Score(verdict="infra_error", message=message,
                                           evaluator_version=EVALUATOR_VERSION),
                               evaluation=None, placement=placement).model_dump(mode="json")

        try:
            task = find_task(parsed.task)
        except KeyError:
            return refuse(f"evaluator on {self.info.host} has no task {parsed.task}: give every node the same "
                          "suite (CRUCIBLE_TASKS)")
        if task_digest(task) != parsed.task_digest or self.info.evaluator_digest != parsed.evaluator_digest:
            return refuse(f"evaluator on {self.info.host} has another copy of {parsed.task} or of the "
                          "evaluator than the head: install the same crucible and suite on every node")
        cancel = self._cancels[parsed.id] = threading.Event()
        folder = Path(tempfile.mkdtemp(prefix="crucible-order-"))
        try:  # a private folder per order, gone after it: nothing of one order is seen by the next
            write_files(folder / "submission", parsed.files)
            score, ev = score_session(task, folder / "submission", self.backend,
                                      expected_hash=parsed.expected_hash, snapshots=folder / "snapshots",
                                      pool=self.pools.get(self.backend, self._engine_gpu()),
                                      gpu=self._engine_gpu(), timeout_s=parsed.timeout_s, cancel=cancel)
        finally:
            self._cancels.pop(parsed.id, None)
            _remove(folder)
        seen = ev.device.name if ev is not None and ev.device is not None else self.info.gpu_name
        return EvalVerdict(score=score, evaluation=ev, placement=placement.model_copy(
            update={"gpu_name": seen})).model_dump(mode="json")

    def close(self) -> None:
        self.pools.close()


def _remove(folder: Path) -> None:
    for path in folder.rglob("*"):  # snapshots are read-only
        if path.is_dir():
            path.chmod(0o700)
    shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- the head's side


class RayScoring:
    """A Scorer (harness/scoring.py) on a Ray cluster's evaluators."""

    def __init__(self, ray: Any, actors: list[tuple[Any, EvaluatorInfo]], backend: Backend, address: str,
                 owns_cluster: bool) -> None:
        self.ray, self.backend, self.address, self.owns_cluster = ray, backend, address, owns_cluster
        self.evaluators = actors
        self._idle: dict[str, queue.Queue[tuple[Any, EvaluatorInfo]]] = {}
        for actor, info in actors:
            self._idle.setdefault(info.kind, queue.Queue()).put((actor, info))
        self._alive = {id(a): True for a, _ in actors}
        self._lock = threading.Lock()
        self._orders = 0

    @classmethod
    def connect(cls, address: str, backend: Backend | None = None, *, evaluators: int | None = None,
                timeout_s: float = 300) -> RayScoring:
        """Join the cluster at `address` and start an evaluator per GPU (at most `evaluators`). `backend`:
        the kind of GPU final scoring is for (None: the kind most evaluators have)."""
        ray = require_ray()
        owns = False
        if not ray.is_initialized():
            env = {k: v for k, v in os.environ.items() if k in FORWARDED_ENV}
            try:
                if address == "local" or address.startswith("local:"):
                    here = detect_backend()
                    gpus = int(address.removeprefix("local").removeprefix(":") or len(list_gpus(here)))
                    kinds = {vendor_resource(VENDOR[here]): gpus} if here in VENDOR and gpus else {}
                    ray.init(num_gpus=gpus, resources=kinds, include_dashboard=False, log_to_driver=False,
                             runtime_env={"env_vars": env})
                    owns = True
                else:
                    ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": env})
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RayUnavailable(f"cannot join the Ray cluster at {address!r} ({exc}); start one with "
                                     "`ray start --head --num-gpus=N`, or pass --ray local") from None
        actors = start_evaluators(ray, evaluators)
        if not actors:
            if owns:
                ray.shutdown()
            raise RayUnavailable(f"the Ray cluster at {address!r} has no GPU to score on (no node declares "
                                 "`GPU` resources); start its nodes with --num-gpus")
        infos = [EvaluatorInfo.model_validate(i) for i in ray.get([a.ready.remote() for a in actors],
                                                                   timeout=timeout_s)]
        from .session import evaluator_digest

        other = sorted({f"{i.host} GPU {i.gpu}" for i in infos if i.evaluator_digest != evaluator_digest()})
        wrong = sorted({m for i in infos if (m := i.mismatch())})
        if wrong:
            for actor in actors:
                stop_evaluator(ray, actor)
            if owns:
                ray.shutdown()
            raise RayUnavailable("a node declares another vendor than its GPUs are: " + "; ".join(wrong)
                                 + f"; fix its `ray start --resources` ({VENDOR_RESOURCE}nvidia / {VENDOR_RESOURCE}amd)")
        if other:
            for actor in actors:
                stop_evaluator(ray, actor)
            if owns:
                ray.shutdown()
            raise RayUnavailable(f"the evaluators on {', '.join(other)} run another version of the engine "
                                 "(toolkit/) than this host: install the same crucible on every node")
        kinds = [i.kind for i in infos]
        chosen = backend or max(set(kinds), key=kinds.count)
        return cls(ray, list(zip(actors, infos, strict=True)), chosen, address, owns)

    @property
    def where(self) -> str:
        hosts = sorted({i.host for _, i in self.evaluators})
        names = sorted({i.gpu_name for _, i in self.evaluators})
        return (f"Ray cluster {self.address}: {len(self.evaluators)} evaluator(s) on {len(hosts)} host(s) "
                f"({', '.join(names)})")

    def kinds(self) -> set[str]:
        """The kinds (backends) of the evaluators still in rotation."""
        with self._lock:
            return {i.kind for a, i in self.evaluators if self._alive[id(a)]}

    def _route(self, task: Task) -> Route:
        """Which evaluators' kind this task's order goes to (placement.route), or a refusal."""
        return route(task.spec, self.backend, self.kinds(), where="the cluster")  # type: ignore[arg-type]

    def _take(self, kind: str, cancel: threading.Event | None) -> tuple[Any, EvaluatorInfo] | None:
        idle = self._idle.get(kind)
        while idle is not None:
            with self._lock:
                if not any(self._alive[id(a)] for a, i in self.evaluators if i.kind == kind):
                    return None
            try:
                return idle.get(timeout=0.2)
            except queue.Empty:
                if cancel is not None and cancel.is_set():
                    return None
        return None

    def _retire(self, actor: Any) -> None:
        with self._lock:
            self._alive[id(actor)] = False
        stop_evaluator(self.ray, actor)

    def order(self, task: Task, files: dict[str, str], *, expected_hash: str | None = None,
              timeout_s: float | None = None) -> EvalOrder:
        from .session import evaluator_digest, task_digest

        with self._lock:
            self._orders += 1
            n = self._orders
        return EvalOrder(id=f"{os.getpid()}-{n}", task=task.id, task_digest=task_digest(task),
                         evaluator_digest=evaluator_digest(), files=files, expected_hash=expected_hash,
                         timeout_s=timeout_s)

    def score(self, task: Task, submission: Path | None, backend: Backend, *, expected_hash: str | None = None,
              timeout_s: float | None = None, cancel: threading.Event | None = None) -> Placed:
        if submission is None:
            from .scoring import score_session

            score, ev = score_session(task, None, backend)
            return Placed(score=score, evaluation=ev, placement=Placement(attempts=0))
        order = self.order(task, submission_files(submission), expected_hash=expected_hash, timeout_s=timeout_s)
        return self.send(task, order, cancel)

    def send(self, task: Task, order: EvalOrder, cancel: threading.Event | None = None) -> Placed:
        """Run `order` on an idle evaluator of the kind its task needs, retrying on another where one dies or
        its GPU fails."""
        from .scoring import refused, routed

        way = self._route(task)
        if way.backend is None:
            return refused(way.refusal)
        return routed(self._send(way.backend, order, cancel), way)

    def _send(self, kind: str, order: EvalOrder, cancel: threading.Event | None) -> Placed:
        notes: list[str] = []
        for n in range(1, MAX_ATTEMPTS + 1):
            taken = self._take(kind, cancel)
            if taken is None:
                why = "cancelled" if cancel is not None and cancel.is_set() else f"no {kind} evaluator is left"
                return _infra(f"no evaluator to score on: {why}", n - 1, notes)
            actor, info = taken
            ref = actor.score.remote(order.model_dump(mode="json"))
            try:
                verdict = EvalVerdict.model_validate(self._wait(ref, actor, order.id, cancel))
            except self.ray.exceptions.RayActorError as exc:
                self._retire(actor)
                notes.append(f"the evaluator on {info.host} GPU {info.gpu} died: {str(exc).splitlines()[0][:200]}")
                continue
            except BaseException:  # a bug of ours or an interrupt: the evaluator stays in rotation
                self._idle[kind].put(taken)
                raise
            if is_device_fault(verdict.evaluation):
                self._retire(actor)
                notes.append(f"GPU {info.gpu} on {info.host} failed and left rotation")
                if n < MAX_ATTEMPTS:
                    continue
            else:
                self._idle[kind].put(taken)
            return Placed(score=verdict.score, evaluation=verdict.evaluation, placement=verdict.placement.model_copy(
                update={"attempts": n, "note": "; ".join(notes)}))
        return _infra(f"gave up after {MAX_ATTEMPTS} evaluators failed", MAX_ATTEMPTS, notes)

    def _wait(self, ref: Any, actor: Any, order_id: str, cancel: threading.Event | None) -> dict:
        while True:
            done, _ = self.ray.wait([ref], timeout=0.2)
            if done:
                return self.ray.get(ref)
            if cancel is not None and cancel.is_set():
                # Asked again until it ends: the order may not have reached its evaluator's thread yet.
                # The evaluator kills the judge; the verdict says cancelled.
                actor.cancel.remote(order_id)

    def ping(self, order: EvalOrder) -> float:
        """Seconds of one round trip to an idle evaluator that does not evaluate (the benchmark's)."""
        actor, info = self._take(self.backend, None) or (None, None)
        if actor is None:
            raise RayUnavailable("no evaluator is left")
        try:
            started = time.perf_counter()
            EvalVerdict.model_validate(self.ray.get(actor.ping.remote(order.model_dump(mode="json"))))
            return time.perf_counter() - started
        finally:
            self._idle[self.backend].put((actor, info))

    def close(self) -> None:
        for actor, _ in self.evaluators:
            if self._alive.get(id(actor)):
                stop_evaluator(self.ray, actor)
        if self.owns_cluster:
            self.ray.shutdown()


def _infra(message: str, attempts: int, notes: list[str]) -> Placed:
    return Placed(score=Score(verdict="infra_error", message=message, evaluator_version=EVALUATOR_VERSION),
                  evaluation=None, placement=Placement(attempts=attempts, note="; ".join(notes)))


def stop_evaluator(ray: Any, actor: Any) -> None:
    """Close its judge pools, then kill it: a judge started ahead does not die with its parent, so an
    evaluator that is only killed would leave one behind."""
    with contextlib.suppress(ray.exceptions.RayError, TimeoutError):  # already gone
        ray.get(actor.close.remote(), timeout=30)
    ray.kill(actor)


def start_evaluators(ray: Any, limit: int | None = None) -> list[Any]:
    """An Evaluator actor per GPU of every alive node, pinned to it (num_gpus=1: Ray gives each its own).
    Where the node declares its GPUs' vendor (`gpu_vendor_nvidia` / `gpu_vendor_amd` resources), each
    evaluator takes one unit of it too, as many as declared."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(Evaluator)
    env = {k: v for k, v in os.environ.items() if k in FORWARDED_ENV}
    actors = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        resources = node.get("Resources", {})
        kinds = [k for k in sorted(resources) if k.startswith(VENDOR_RESOURCE) for _ in range(int(resources[k]))]
        for n in range(int(resources.get("GPU", 0))):
            if limit is not None and len(actors) >= limit:
                return actors
            actors.append(remote.options(
                num_gpus=1, num_cpus=0, max_concurrency=2,  # the second thread only takes cancel()
                **({"resources": {kinds[n]: 1}} if n < len(kinds) else {}),
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(env))
    return actors
