"""The trusted side of evaluation: the judge, which never imports or runs candidate code.

    jobs.py       the judge's worker jobs (evaluate, compile); starts the runners before importing torch
    link.py       its end of one runner: start it sandboxed, ask, parse and match every reply
    cases.py      the inputs it makes (per seed; fresh for every timed call) and the arena layout
    evaluate.py   the passes of an evaluation: checks and oracles, what ran, timing and re-checks
    timing.py     timed calls driven from here, and the bounds the runner's reports must meet
    what_ran.py   what one call ran, from the runner's profiler (a claim)

docs/architecture.md draws the processes and what crosses between them.
"""
