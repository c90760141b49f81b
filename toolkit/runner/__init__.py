"""The untrusted side of evaluation: the only code that runs in the same process as candidate code.

    main.py      the runner process: applies its own sandbox, then serves the judge's requests
    loading.py   turns a KernelSpec into a callable (per loader: Python module, shared library, reference)
    profiler.py  what one call launched, as this process's profiler sees it (a claim the judge bounds)

Nothing here is trusted: whatever a runner reports is checked by the judge (toolkit/judge/), which holds
the reference, the comparisons, the oracles and the clocks in a process of its own.
"""
