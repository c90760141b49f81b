"""Timed calls driven by the judge: fresh inputs every call, each call timed on its own from outside.

On a GPU, per call, the judge's stream and the runner's stream interleave through the arena's handshake
words (toolkit/shared_memory.py); both processes queue a whole batch ahead:

    judge stream:   refill inputs (fresh contents) -> poison outputs -> flush L2 -> gate -> event A
                    -> poison a few random output elements -> go = k -> wait done >= k -> event B
                    -> [sampled: copy the outputs aside]
    runner stream:  wait go >= k -> event a -> the call -> event b -> done = k

    reported  = b - a          the runner's claim (no launch gaps: everything was queued while gated)
    judged    = B - A - the chain's own cost, calibrated on the baseline's runner (trusted to report honestly)

A window may hold several calls (TimingOptions.calls_per_window, on small configs): the runner queues them
back to back between one `go` and one `done`, call i on the arena's input set i, each with its own events,
and the judge's per-call measure is (B - A - chain) / calls. The chain (~285 us on an H200: two switches
between the processes' contexts) varies by a few us from one runner to another, which on calls of a few us
is most of the measure; a window shares it.

Every timed call sees contents it has never seen, and sampled calls (chosen by the judge after the fact)
are checked against the reference, so a cache keyed on contents or on the poison pattern gains nothing,
and work deferred past the call's end is either inside B or missing from the copied outputs.

On the CPU each call is a request: the judge refills, asks, and reads how much CPU time the runner's
processes spent on it (their kernel CPU clocks; the runner computes on one thread, so that bounds the
call's wall time from below, and waiting for a busy CPU does not inflate it).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..checking import FP8_NAN, is_fp8, poison_
from ..integrity import finding
from ..protocol import Call, Called, TimeBatch, Timed
from ..results import IntegrityFinding, TimingStats
from ..shared_memory import DONE_WORD, GO_WORD, Arena, reached, wait_value, write_value
from .cases import Fresh, FreshCall
from .link import ProtocolViolation, RunnerLink

GATE_US = 150
"""Before each timed call the judge's stream idles this long, so the runner (which queues one call at a
time) has queued the call before `go`: no host latency of the runner inside the judge's events."""
WINDOW_MAX_BYTES = 64 << 20
"""Timed windows of several calls (TimingOptions.calls_per_window) only where one call's inputs and outputs
fit this: the arena holds a set per call, and larger calls dwarf the handshake's variation anyway."""
GATE_EXTRA_US = GATE_US
"""More gate per further call of a window: the runner queues the whole window before `go` (a call that is
slow to queue, several library ops from Python, must not put host latency into the judge's window)."""
SAMPLE_EVERY = 6
"""About one timed call in this many has its outputs kept (at least one per batch)."""
RECHECKS = 8
"""How many kept timed calls of a config the judge checks: a uniform draw over the whole timing phase
(Bound.keep), so a kernel cannot count the checks off and cheat once they are used up."""
UNBLOCK = 0xFFFFFFFF


@dataclass
class Sample:
    """A timed call whose outputs the judge kept to check."""

    call: FreshCall
    outputs: list[torch.Tensor]
    previous: FreshCall | None
    """The call before it: outputs that answer its inputs are stale."""


@dataclass
class Bound:
    """One subject's timed calls: the runner's claims and the judge's own measure of the same calls."""

    reported_us: list[float] = field(default_factory=list)
    """Per call, the runner's claim (in a window of several calls, the window's mean)."""
    judged_us: list[float] = field(default_factory=list)
    """Per window (one handshake: one call, or `per_go` back to back), the judge's own clock."""
    window_us: list[float] = field(default_factory=list)
    """Per window, the sum of its calls' claims (what the judge's clock should see, less the handshake)."""
    samples: list[Sample] = field(default_factory=list)
    """At most RECHECKS kept calls, each call of the phase's sampled ones equally likely to be here."""
    offered: int = 0
    """How many sampled calls the phase has had (the reservoir's count)."""
    flush_us: list[float] = field(default_factory=list)
    """GPU: the judge's own flush and gate before each call (longer when another context holds the GPU)."""


    def keep(self, sample: Sample, rng: random.Random) -> None:
        """Reservoir sampling (Algorithm R): after n offers every one of them is kept with probability
        RECHECKS / n, and only RECHECKS copies of the outputs are held however long the phase runs."""
        self.offered += 1
        if len(self.samples) < RECHECKS:
            self.samples.append(sample)
        else:
            slot = rng.randrange(self.offered)
            if slot < RECHECKS:
                self.samples[slot] = sample


class Subject:
    """One kernel in one runner, with its arena and the views of it the judge fills and reads."""

    def __init__(self, name: str, link: RunnerLink, arena: Arena, inputs: list[torch.Tensor],
                 outputs: list[torch.Tensor], kernel: str | None, counter: list[int] | None = None,
                 sets: list[tuple[list[torch.Tensor], list[torch.Tensor]]] | None = None, per_go: int = 1):
        self.name, self.link, self.arena, self.kernel = name, link, arena, kernel
        self.inputs, self.outputs = inputs, outputs
        self.sets = sets or [(inputs, outputs)]
        """The arena's input/output sets (the first is inputs, outputs)."""
        self.per_go = per_go
        """Timed calls per window (GPU): one handshake shared by that many calls, on sets of their own."""
        if per_go > len(self.sets):
            raise ValueError(f"a window of {per_go} calls needs as many input sets; the arena has {len(self.sets)}")
        self.counter = counter if counter is not None else [0]
        """The last sequence number used on this arena (kernels sharing a runner share it)."""
        self.bound = Bound()

    @property
    def seq(self) -> int:
        return self.counter[0]

    @seq.setter
    def seq(self, value: int) -> None:
        self.counter[0] = value


SETTLE_S = 5.0
"""How long the judge's stream may take to finish a batch the runner says it has finished (microseconds,
honestly: the runner waits for its own stream before it answers)."""
_RELEASE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def _release_stream(device: torch.device) -> torch.cuda.Stream:
    """The side stream that releases a batch's waits when it fails (made with the flusher, before any)."""
    key = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
    if key not in _RELEASE_STREAMS:
        _RELEASE_STREAMS[key] = torch.cuda.Stream(key)
    return _RELEASE_STREAMS[key]


def _release(stream: torch.cuda.Stream, go: int, done: int, last: torch.cuda.Event | None) -> None:
    """After a failed batch, both streams let go: ours may wait on a `done` that will not come, and a dead
    runner's on a `go` (the driver tears its context down only once that channel drains). The side stream
    was made in advance: making one now can block in the driver behind that teardown (seen on the H200). If
    ours does not drain even so, the failure being raised says enough; nothing here blocks."""
    side = _release_stream(stream.device)
    write_value(side, go, UNBLOCK)
    write_value(side, done, UNBLOCK)
    written = torch.cuda.Event()
    written.record(side)
    for event in (written, last):  # the arena is unmapped later only once both streams are past it
        if event is not None and not reached(event, SETTLE_S):
            return


def flusher(device: torch.device) -> Callable[..., None]:
    """Flush the L2 (read twice its size), then hold the stream for the gate (longer for a window of
    `per_go` calls)."""
    if device.type != "cuda":
        return lambda per_go=1: None
    _release_stream(device)
    props = torch.cuda.get_device_properties(device)
    size = max(2 * int(props.L2_cache_size), 1 << 20)
    buf = torch.ones(size // 4, dtype=torch.int32, device=device)
    out = torch.empty((), dtype=torch.int64, device=device)
    cycles = int(GATE_US * 1e-6 * getattr(props, "clock_rate", 1_980_000) * 1e3)  # clock_rate is in kHz

    extra = int(GATE_EXTRA_US / GATE_US * cycles)

    def flush(per_go: int = 1) -> None:
        torch.sum(buf, dim=0, out=out)
        torch.cuda._sleep(cycles + (per_go - 1) * extra)
    return flush


SPOTS = 32


_SPOT_GENERATORS: dict[torch.device, torch.Generator] = {}


def _spot_poison(t: torch.Tensor) -> None:
    """Poison SPOTS random elements, at positions drawn on the device from a generator seeded from the OS
    (torch's default generator starts from a fixed seed: a runner could replay its draws)."""
    if t.numel():
        gen = _SPOT_GENERATORS.get(t.device)
        if gen is None:
            gen = _SPOT_GENERATORS[t.device] = torch.Generator(device=t.device)
            gen.manual_seed(random.SystemRandom().getrandbits(63))
        flat = t.view(-1).view(torch.uint8) if is_fp8(t) else t.view(-1)  # few kernels take FP8
        flat.index_fill_(0, torch.randint(0, flat.numel(), (SPOTS,), device=t.device, generator=gen),
                         FP8_NAN if is_fp8(t) else _poison_value(t))


def _poison_value(t: torch.Tensor) -> float | int | bool:
    if t.dtype.is_floating_point:
        return float("nan")
    return True if t.dtype == torch.bool else torch.iinfo(t.dtype).max


def _prepare(inputs: list[torch.Tensor], outputs: list[torch.Tensor], fresh: Fresh | None) -> FreshCall | None:
    """Before a timed call: fresh inputs (none for an empty call), poisoned outputs."""
    call = fresh.draw() if fresh else None
    if fresh and call:
        fresh.fill(inputs, call)
    for t in outputs:
        poison_(t)
    return call


def gpu_batch(subject: Subject, fresh: Fresh | None, params: dict, count: int, flush: Callable[..., None],
              sample: set[int]) -> list[Sample]:
    """Queue `count` gated windows on both sides (each `subject.per_go` calls, on sets of their own), collect
    both measures; on any failure release the judge's stream (it may be waiting on a done word that will
    never come) before raising. `sample`: indices of calls (window * per_go + call) whose outputs to keep;
    returns those calls."""
    stream = torch.cuda.current_stream()
    go, done = subject.arena.word_address(GO_WORD), subject.arena.word_address(DONE_WORD)
    per_go = subject.per_go
    sets = subject.sets[:per_go]
    first = subject.seq + 1
    subject.link.ready()
    subject.link.send(TimeBatch(kernel=subject.kernel, first_seq=first, count=count, params=params, per_go=per_go))
    events, kept = [], []
    previous = None
    try:
        for k in range(count):
            calls = [_prepare(ins, outs, fresh) for ins, outs in sets]
            f = torch.cuda.Event(enable_timing=True)
            f.record(stream)
            flush(per_go)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            for _, outs in sets:
                for t in outs:
                    _spot_poison(t)
            write_value(stream, go, first + k)
            wait_value(stream, done, first + k)
            b.record(stream)
            events.append((f, a, b))
            for i, (call, (_, outs)) in enumerate(zip(calls, sets, strict=True)):
                if call and k * per_go + i in sample:
                    kept.append(Sample(call, [o.clone() for o in outs], previous))
                previous = call
        reply = subject.link.receive(Timed)
        if reply.first_seq != first or len(reply.us) != count * per_go:
            raise ProtocolViolation(f"the {subject.link.role} answered a batch of {count * per_go} calls from {first} "
                                    f"with {len(reply.us)} times from {reply.first_seq}")
        if events and not reached(events[-1][2], SETTLE_S):
            raise ProtocolViolation(f"the {subject.link.role} answered a batch of {count} windows, but after "
                                    f"{SETTLE_S:g} s its stream had still not said the last one was done")
    except BaseException:
        _release(stream, go, done, events[-1][2] if events else None)
        raise
    subject.seq = first + count - 1
    # A window's calls are credited its mean: a call that did the window's work for the others (it can read
    # every set's inputs: all were written before `go`) leaves the others near zero, and a median of those
    # would be no time at all.
    windows = [sum(reply.us[k * per_go:(k + 1) * per_go]) for k in range(count)]
    subject.bound.reported_us += [w / per_go for w in windows for _ in range(per_go)]
    subject.bound.window_us += windows
    subject.bound.judged_us += [a.elapsed_time(b) * 1e3 for _, a, b in events]
    subject.bound.flush_us += [f.elapsed_time(a) * 1e3 for f, a, _ in events]
    return kept


def cpu_batch(subject: Subject, fresh: Fresh | None, params: dict, count: int, sample: set[int]) -> list[Sample]:
    """On the CPU the judge's measure of a call is the CPU time the runner's processes spent since the last
    call's reply: the windows cover the whole batch, so work done between calls (a thread that computes the
    next answer as soon as the judge writes the inputs, before it is asked) is charged to the next call."""
    previous, kept = None, []
    last = subject.link.cpu_seconds()
    for k in range(count):
        call = _prepare(subject.inputs, subject.outputs, fresh)
        subject.seq += 1
        reply = subject.link.ask(Call(kernel=subject.kernel, seq=subject.seq, params=params), Called)
        now = subject.link.cpu_seconds()
        judged, last = (now - last) * 1e6, now
        if reply.seq != subject.seq:
            raise ProtocolViolation(f"the {subject.link.role} answered call {reply.seq} when asked for call "
                                    f"{subject.seq}")
        subject.bound.reported_us.append(reply.us)
        subject.bound.window_us.append(reply.us)
        subject.bound.judged_us.append(judged)
        if call and k in sample:
            kept.append(Sample(call, [o.clone() for o in subject.outputs], previous))
        previous = call
    return kept


def run_batch(subject: Subject, fresh: Fresh | None, params: dict, count: int, flush: Callable[..., None],
              rng: random.Random, checked: bool) -> None:
    """`count` windows on a GPU (each of subject.per_go calls), `count` calls on the CPU."""
    on_gpu = subject.arena.device.type == "cuda"
    calls = count * subject.per_go if on_gpu else count
    sample = set(rng.sample(range(calls), max(1, calls // SAMPLE_EVERY))) if checked and fresh else set()
    if on_gpu:
        kept = gpu_batch(subject, fresh, params, count, flush, sample)
    else:
        kept = cpu_batch(subject, fresh, params, count, sample)
    for s in kept:
        subject.bound.keep(s, rng)


BOUND_GPU = (0.85, 3.0)
"""On a GPU a reported median under 85% of the judge's own (net) median, less 3 us, is flagged: the
handshake's own cost varies by about 2 us on an H200 (benchmarks/cross_process_timing.py)."""
BOUND_CPU = (0.85, 300.0)
"""On the CPU the judge's measure is the CPU time the runner spent on each call, less the request's own
(calibrated on the baseline's runner); a single-threaded call's wall time is at least that."""
MIN_US = 0.5
"""The least time a call is scored at: no GPU call takes less, and a time of zero breaks a geometric mean."""
CONTENTION = (1.5, 20.0)
"""The judge's own flush and gate, timed before every call: taking more than 1.5x (and 20 us) as long while
the baseline is timed as while the candidate is means something else kept the GPU busy then."""


def bound_us(stats: TimingStats, on_gpu: bool) -> float:
    """The least median the judge's own clock allows (0 without one)."""
    ratio, slack = BOUND_GPU if on_gpu else BOUND_CPU
    return max((stats.judged_us or 0.0) * ratio - slack, 0.0)


def contention_findings(candidate_flush: list[float], baseline_flush: list[float],
                         config: str) -> list[IntegrityFinding]:
    if not candidate_flush or not baseline_flush:
        return []
    during_cand, during_base = statistics.median(candidate_flush), statistics.median(baseline_flush)
    ratio, slack = CONTENTION
    if during_base > during_cand * ratio + slack:
        return [finding("contention", config, f"the judge's own flush took {during_base:.0f} us before the "
                        f"baseline's calls and {during_cand:.0f} us before the candidate's: the GPU was kept busy "
                        "while the baseline was timed (work the candidate left running?)")]
    return []


def bound_findings(stats: TimingStats, config: str, on_gpu: bool) -> list[IntegrityFinding]:
    judged = stats.judged_us or 0.0
    if stats.median_us < bound_us(stats, on_gpu):
        return [finding("timing_bound", config, f"the runner reported {stats.median_us:.1f} us per call, but the "
                        f"judge's own clock saw {judged:.1f} us per call (net of the handshake's "
                        f"{stats.overhead_us:.1f} us): the reported times are not the calls' times")]
    return []


def trusted_overhead_us(subject: Subject) -> float | None:
    """What the chain adds to a call, from a trusted runner's timed calls (the baseline's): its judged time
    less its own (honest) report. Better than an empty call's: a call with a kernel costs the handshake a
    few microseconds more than an empty one."""
    pairs = list(zip(subject.bound.judged_us, subject.bound.window_us, strict=True))
    return statistics.median(j - r for j, r in pairs) if pairs else None


def empty_call_us(subject: Subject, flush: Callable[..., None], count: int = 24) -> tuple[float, float]:
    """An empty call through `subject`'s runner, judged and reported: what the chain costs, and what the
    runner's own events measure around nothing (subtracted from every reported time, as a timer subtracts
    its empty region)."""
    empty = Subject("empty", subject.link, subject.arena, subject.inputs, subject.outputs, None, subject.counter)
    run_batch(empty, None, {}, count, flush, random.Random(0), checked=False)
    skip = len(empty.bound.judged_us) // 4  # the first calls warm the path up
    return (statistics.median(empty.bound.judged_us[skip:]), statistics.median(empty.bound.reported_us[skip:]))
