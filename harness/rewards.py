"""The reward service: trusted verdicts for batches of (task, source), for RL loops that train kernel
writers. A verdict here is final scoring's (score_session: visible and hidden configs, the judge and its
sandboxed runners, every runtime defence), on this host's GPUs or a Ray cluster's.

    service = RewardService.local()  or  RewardService.on_ray("auto")
    service.submit(RewardRequest) ──▶ Future[Reward]       Busy when `max_pending` are already in flight
    service.score([RewardRequest, ...]) ──▶ [Reward, ...]  waits for room as needed; in request order
    service.cancel(id)                                       its verdict: infra_error (cancelled)

    a request ──▶ a folder of its own (its source as the task's candidate file) ──▶ Scorer.score, with the
        request's time limit ──▶ Reward ──▶ the folder is removed

No state crosses requests: each gets its own folder and snapshot, a judge and runners that nothing else
ran in (the pools start them ahead, never reuse them), and its own cancel event.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from crucible.toolkit.evaluation import Backend, resolve_backend
from crucible.toolkit.task import MAX_TIMEOUT_S, Task, find_task

from .models import Placement, Score
from .scoring import LocalScoring, Scorer

DEFAULT_MAX_PENDING = 256


class Busy(Exception):
    """`max_pending` requests are in flight: wait for some to finish (or call `score`, which waits)."""


class RewardRequest(BaseModel):
    """One candidate to score."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str
    """A task id of the suite."""
    source: str
    """The candidate file's whole text (the task's `candidate`, e.g. kernel.py or kernel.cu)."""
    files: dict[str, str] = Field(default_factory=dict)
    """Other source files beside it, by name (headers a CUDA kernel includes)."""
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    """The evaluation's time limit (default: the task's); past it the verdict is `timeout`."""
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)


class Reward(BaseModel):
    """The verdict of one request: the Score final scoring gives, where it ran, how long it took."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    task: str
    score: Score
    placement: Placement
    seconds: float
    """Wall clock from the start of its evaluation to its verdict (not the wait for room)."""


class RewardService:
    """Scores RewardRequests on a Scorer, `workers` at a time, at most `max_pending` accepted at once."""

    def __init__(self, scorer: Scorer, backend: Backend, *, workers: int,
                 max_pending: int = DEFAULT_MAX_PENDING) -> None:
        self.scorer, self.backend = scorer, backend
        self.max_pending = max_pending
        self._room = threading.BoundedSemaphore(max_pending)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reward")
        self._cancels: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    @classmethod
    def local(cls, gpus: list[int] | None = None, *, max_pending: int = DEFAULT_MAX_PENDING) -> RewardService:
        """On this host's GPUs (`gpus`, default all): one evaluation per GPU at a time; on the cpu backend,
        two at a time."""
        backend = resolve_backend("auto")
        scorer = LocalScoring(gpus)
        workers = max(1, len(scorer.placer(backend).devices)) if backend != "cpu" else 2
        return cls(scorer, backend, workers=workers, max_pending=max_pending)

    @classmethod
    def on_ray(cls, address: str, *, max_pending: int = DEFAULT_MAX_PENDING) -> RewardService:
        """On a Ray cluster's GPUs (harness/ray_backend.py): one evaluator per GPU, its judge started ahead."""
        from .ray_backend import RayScoring

        scorer = RayScoring.connect(address)
        return cls(scorer, scorer.backend, workers=len(scorer.evaluators), max_pending=max_pending)

    def submit(self, request: RewardRequest, *, block: bool = False) -> Future[Reward]:
        """Accept one request. Raises Busy when `max_pending` are in flight (unless `block`, which waits
        for room), ValueError for a task the suite does not have."""
        task = _task(request.task)
        if not self._room.acquire(blocking=block):
            raise Busy(f"{self.max_pending} requests are in flight; wait for some to finish")
        cancel = threading.Event()
        with self._lock:
            if request.id in self._cancels:
                self._room.release()
                raise ValueError(f"a request with id {request.id!r} is already in flight")
            self._cancels[request.id] = cancel
        try:
            future = self._pool.submit(self._score, task, request, cancel)
        except BaseException:
            self._done(request.id)
            raise
        future.add_done_callback(lambda _: self._done(request.id))
        return future

    def score(self, requests: list[RequestLike]) -> list[Reward]:
        """Score a batch; returns once every verdict is in, in the order asked."""
        futures = [self.submit(r if isinstance(r, RewardRequest) else RewardRequest.model_validate(r), block=True)
                   for r in requests]
        return [f.result() for f in futures]

    def cancel(self, request_id: str) -> bool:
        """Stop a request in flight (its verdict: infra_error, cancelled); False if none has that id."""
        with self._lock:
            event = self._cancels.get(request_id)
        if event is not None:
            event.set()
        return event is not None

    def pending(self) -> int:
        with self._lock:
            return len(self._cancels)

    def _done(self, request_id: str) -> None:
        with self._lock:
            if self._cancels.pop(request_id, None) is None:
                return
        self._room.release()

    def _score(self, task: Task, request: RewardRequest, cancel: threading.Event) -> Reward:
        started = time.perf_counter()
        folder = Path(tempfile.mkdtemp(prefix="crucible-reward-"))
        try:
            submission = folder / "submission"
            submission.mkdir()
            for name, text in {**request.files, task.spec.candidate: request.source}.items():
                target = (submission / name).resolve()
                if not target.is_relative_to(submission):
                    raise ValueError(f"request {request.id}: file {name!r} escapes the submission folder")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            if cancel.is_set():  # cancelled while it waited for a worker
                placed_score = Score(verdict="infra_error", message="cancelled before it started")
                return Reward(id=request.id, task=task.id, score=placed_score, placement=Placement(attempts=0),
                              seconds=0.0)
            placed = self.scorer.score(task, submission, self.backend, timeout_s=request.timeout_s,
                                       cancel=cancel)
            return Reward(id=request.id, task=task.id, score=placed.score, placement=placed.placement,
                          seconds=round(time.perf_counter() - started, 3))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        """Cancel what is in flight, wait for it, and close the scorer's judges (and Ray evaluators)."""
        with self._lock:
            events = list(self._cancels.values())
        for event in events:
            event.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.scorer.close()

    def __enter__(self) -> RewardService:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


RequestLike = RewardRequest | dict


def _task(task_id: str) -> Task:
    try:
        return find_task(task_id)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
