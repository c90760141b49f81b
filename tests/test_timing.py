"""Timing on the CPU backend: the statistics and the interleaving (the CUDA path is in test_gpu.py)."""

from __future__ import annotations

import torch

from crucible.toolkit.timing import TimingOptions, median_rse, summarize, time_subjects


def test_the_summary_gives_the_median_and_its_spread() -> None:
    stats = summarize([10.0, 11.0, 9.0, 10.0, 50.0], "cpu_wall", comparable=False)
    assert stats.median_us == 10.0 and stats.min_us == 9.0 and stats.max_us == 50.0
    assert stats.reps == 5 and not stats.comparable


def test_the_relative_standard_error_shrinks_with_more_repetitions_and_ignores_outliers() -> None:
    few = [100.0, 101.0, 99.0, 100.5, 99.5]
    many = few * 20
    assert median_rse(many) < median_rse(few)
    assert median_rse(many + [10_000.0]) < 0.01


def test_subjects_are_interleaved_in_rotating_order() -> None:
    calls: list[str] = []
    subjects = {name: (lambda i, name=name: calls.append(name)) for name in ("a", "b", "c")}
    opts = TimingOptions(min_reps=4, max_reps=4, warmup_ms=0, budget_s=10)
    stats, _ = time_subjects(subjects, 1, opts, torch.device("cpu"))
    timed = calls[3:]  # one warm-up call each first
    assert timed[:3] == ["a", "b", "c"] and timed[3:6] == ["b", "c", "a"]
    assert all(s.reps == 4 and s.method == "cpu_wall" for s in stats.values())


def test_timing_stops_at_the_budget() -> None:
    import time

    opts = TimingOptions(min_reps=3, max_reps=100_000, target_rse=1e-9, warmup_ms=0, budget_s=0.2)
    t0 = time.perf_counter()
    stats, _ = time_subjects({"x": lambda i: sum(range(1000))}, 1, opts, torch.device("cpu"))
    assert time.perf_counter() - t0 < 2 and stats["x"].reps >= 3
