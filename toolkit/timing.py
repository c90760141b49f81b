"""Timing: interleaved, L2-flushed, input-rotated, median with its spread and a stopping rule.

Runs inside the evaluation worker. On CUDA each subject (candidate, baseline, ...) is captured once per
input set into a CUDA graph and replayed between two events on one stream:

    for each repetition, subjects in rotating order:
        flush L2 (read 2x its size) -> event A -> replay graph[set i] -> event B
        time = B - A - (the same for an empty graph)

A graph holds every kernel the call launched, on whatever stream it forked to, and its replay
completes on the launching stream only when all of them are done, so the events cover every stream;
replay also keeps host launch jitter and Python out of the figure. The replay of an empty graph, timed
the same way, is subtracted: what is left is the time the GPU spent on the call (within 1% of Nsight
Compute's gpu__time_duration at 550 us, see benchmarks/RESULTS.md). The flush reads a buffer of twice
the L2's size, which leaves the L2 clean, as Nsight Compute's cache control does, rather than full of
dirty lines the timed call would have to write back. A call that cannot be captured
(it synchronizes, allocates outside the pool, ...) is timed instead as
`event A -> call -> device-wide synchronize -> event B`, minus the measured cost of an empty such
region; the method is recorded with the figure.

Stopping rule: after `min_reps`, stop once every subject's median has a relative standard error under
`target_rse`, or at `max_reps`, or when the time budget is spent.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable

import torch
from pydantic import BaseModel, ConfigDict, Field

from .results import TimingMethod, TimingStats

Subject = Callable[[int], object]
"""Runs one call on input set i."""

# The timer's primitives, bound when the worker imports this module, before any candidate code runs, and at
# the C level where torch has one: a candidate that patches torch.cuda.Event, torch.cuda.synchronize,
# CUDAGraph.replay or time.perf_counter changes names this module no longer looks up (and
# toolkit/integrity.py reports the patch).
_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_event_record = getattr(torch._C._CudaEventBase, "record", None) or torch.cuda.Event.record
_event_elapsed = getattr(torch._C._CudaEventBase, "elapsed_time", None) or torch.cuda.Event.elapsed_time
_event_synchronize = getattr(torch._C._CudaEventBase, "synchronize", None) or torch.cuda.Event.synchronize
_synchronize = getattr(torch._C, "_cuda_synchronize", None) or torch.cuda.synchronize
_CUDAGraph = torch.cuda.CUDAGraph
_graph_capture = torch.cuda.graph
_graph_replay = getattr(getattr(torch._C, "_CUDAGraph", None), "replay", None) or torch.cuda.CUDAGraph.replay


def _new_event() -> torch.cuda.Event:
    return _Event(enable_timing=True)


class TimingOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    warmup_ms: float = Field(default=40, ge=0)
    """Per subject: run at least this long (and every input set once) before timing."""
    min_reps: int = Field(default=10, ge=3)
    max_reps: int = Field(default=2000, ge=3)
    target_rse: float = Field(default=0.001, gt=0)
    """Stop when the median's relative standard error is under this for every subject."""
    budget_s: float = Field(default=2.0, gt=0)
    """Wall-clock budget for the timed repetitions of one config (all subjects together)."""
    flush_l2: bool = True
    use_graphs: bool = True
    calls_per_window: int = Field(default=1, ge=1, le=16)
    """GPU, judge's timer: timed calls between one handshake and the next, each on inputs of its own, on
    configs whose inputs and outputs fit WINDOW_MAX_BYTES. The handshake's cost, and its variation from one
    runner to another (a few us), is shared by that many calls in the judge's own measure."""


QUICK = TimingOptions(warmup_ms=10, min_reps=5, max_reps=200, target_rse=0.01, budget_s=0.3)
CAREFUL = TimingOptions()


def summarize(samples_us: list[float], method: TimingMethod, comparable: bool) -> TimingStats:
    xs = sorted(samples_us)
    n = len(xs)
    med = statistics.median(xs)
    q = statistics.quantiles(xs, n=4) if n >= 4 else [xs[0], med, xs[-1]]
    return TimingStats(median_us=med, min_us=xs[0], max_us=xs[-1], iqr_us=q[2] - q[0],
                       rse=median_rse(xs), reps=n, method=method, comparable=comparable)


def median_rse(xs: list[float]) -> float:
    """Relative standard error of the median, from the MAD (robust to the odd slow repetition)."""
    n = len(xs)
    med = statistics.median(xs)
    if n < 2 or med <= 0:
        return float("inf")
    mad = statistics.median(abs(x - med) for x in xs)
    sigma = 1.4826 * mad
    return 1.2533 * sigma / math.sqrt(n) / med


def _done(samples: dict[str, list[float]], opts: TimingOptions, started: float) -> bool:
    reps = min(len(s) for s in samples.values())
    if reps < opts.min_reps:
        return False
    if reps >= opts.max_reps or _perf_counter() - started > opts.budget_s:
        return True
    return all(median_rse(s) <= opts.target_rse for s in samples.values())


def time_subjects(subjects: dict[str, Subject], n_sets: int, opts: TimingOptions,
                  device: torch.device) -> tuple[dict[str, TimingStats], dict[str, Subject]]:
    """Time each subject, interleaved. Returns the stats and, per subject, the exact path that was timed
    (the graph replay or the call), so the caller can re-check what the timed runs computed."""
    if device.type == "cuda":
        return _time_cuda(subjects, n_sets, opts)
    return _time_cpu(subjects, n_sets, opts), subjects


def _time_cpu(subjects: dict[str, Subject], n_sets: int, opts: TimingOptions) -> dict[str, TimingStats]:
    for fn in subjects.values():
        fn(0)
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    names = list(subjects)
    started = _perf_counter()
    rep = 0
    # The interpreter is slow: a small fixed floor of repetitions, then the same stopping rule.
    cpu_opts = opts.model_copy(update={"min_reps": 3})
    while not _done(samples, cpu_opts, started):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            t0 = _perf_counter()
            subjects[name](rep % n_sets)
            samples[name].append((_perf_counter() - t0) * 1e6)
        rep += 1
    return {name: summarize(s, "cpu_wall", comparable=False).model_copy(update={"input_sets": n_sets})
            for name, s in samples.items()}


def _capture(fn: Subject, n_sets: int) -> list[torch.cuda.CUDAGraph] | None:
    stream = torch.cuda.current_stream()
    graphs = []
    try:
        for i in range(n_sets):
            graph = _CUDAGraph()
            with _graph_capture(graph):
                fn(i)
            graphs.append(graph)
    except RuntimeError:
        # Not capturable (host sync, .item(), cudaMalloc inside the call): fall back to events. A failed
        # capture leaves torch's capture stream current (graph.__exit__ raises before restoring it):
        # put ours back, or later work would run on a stream the timing events do not see.
        torch.cuda.set_stream(stream)
        _synchronize()
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("a failed CUDA-graph capture left the stream capturing") from None
        return None
    return graphs


def _replay_overhead_us(stream: torch.cuda.Stream, flush: Callable[[], object], reps: int = 50) -> float:
    """What replaying an empty graph between two events measures: subtracted from graph timings."""
    graph = _CUDAGraph()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The CUDA Graph is empty": that is the point
        with _graph_capture(graph):
            pass
    pairs = []
    for _ in range(reps):
        flush()
        a, b = _new_event(), _new_event()
        _event_record(a, stream)
        _graph_replay(graph)
        _event_record(b, stream)
        pairs.append((a, b))
    _synchronize()
    return statistics.median(_event_elapsed(a, b) * 1e3 for a, b in pairs)


def _sync_overhead_us(stream: torch.cuda.Stream, reps: int = 50) -> float:
    """What an empty `event -> device sync -> event` region measures: the fallback subtracts it."""
    xs = []
    for _ in range(reps):
        a, b = _new_event(), _new_event()
        _event_record(a, stream)
        _synchronize()
        _event_record(b, stream)
        _event_synchronize(b)
        xs.append(_event_elapsed(a, b) * 1e3)
    return statistics.median(xs)


def _time_cuda(subjects: dict[str, Subject], n_sets: int,
               opts: TimingOptions) -> tuple[dict[str, TimingStats], dict[str, Subject]]:
    stream = torch.cuda.current_stream()
    props = torch.cuda.get_device_properties(stream.device)
    flush_buf = torch.ones(max(2 * int(props.L2_cache_size), 1 << 20) // 4, dtype=torch.int32, device=stream.device)
    flush_out = torch.empty((), dtype=torch.int64, device=stream.device)

    def flush() -> None:
        torch.sum(flush_buf, dim=0, out=flush_out)

    for fn in subjects.values():  # warm-up: compile, autotune, load modules, ramp clocks
        t0 = _perf_counter()
        k = 0
        while k < max(3, n_sets) or (_perf_counter() - t0) * 1e3 < opts.warmup_ms:
            fn(k % n_sets)
            k += 1
            if k % 16 == 0:
                _synchronize()
        _synchronize()

    timed: dict[str, Subject] = {}
    methods: dict[str, TimingMethod] = {}
    for name, fn in subjects.items():
        graphs = _capture(fn, n_sets) if opts.use_graphs else None
        if graphs is not None:
            timed[name] = lambda i, g=graphs: _graph_replay(g[i])
            methods[name] = "cuda_graph"
        else:
            timed[name] = fn
            methods[name] = "cuda_events"
    overhead = {"cuda_graph": _replay_overhead_us(stream, flush) if "cuda_graph" in methods.values() else 0.0,
                "cuda_events": _sync_overhead_us(stream) if "cuda_events" in methods.values() else 0.0}

    samples: dict[str, list[float]] = {name: [] for name in subjects}
    names = list(subjects)
    started = _perf_counter()
    rep = 0
    while not _done(samples, opts, started):
        pending = []
        for _ in range(8):  # a batch of repetitions between host syncs
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                if opts.flush_l2:
                    flush()
                a, b = _new_event(), _new_event()
                _event_record(a, stream)
                timed[name](rep % n_sets)
                if methods[name] == "cuda_events":
                    _synchronize()  # covers work the call left on any stream
                _event_record(b, stream)
                pending.append((name, a, b))
            rep += 1
        _synchronize()
        for name, a, b in pending:
            samples[name].append(max(_event_elapsed(a, b) * 1e3 - overhead[methods[name]], 0.0))
    stats = {name: summarize(s, methods[name], comparable=True).model_copy(
        update={"overhead_us": overhead[methods[name]], "input_sets": n_sets}) for name, s in samples.items()}
    return stats, timed
