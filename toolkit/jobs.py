"""What a worker process can be asked to do: job name -> "module:function".

Each function takes `(payload: dict, progress: Callable[[dict], None]) -> dict` and runs in a worker
process (toolkit/worker_main.py), never in the server. Tests may add entries of their own.

Trusted jobs (TRUSTED_JOBS) never load candidate code: the judge's jobs start sandboxed runners of their
own (toolkit/judge/), which needs what the sandbox takes away (cgroups, namespaces), so they run outside
it. Every other job runs sandboxed.
"""

JOBS: dict[str, str] = {
    "evaluate": "crucible.toolkit.judge.jobs:run_evaluation",
    "compile": "crucible.toolkit.judge.jobs:run_compile",
    "ncu": "crucible.toolkit.ncu:run_ncu_job",
    "calibrate": "crucible.toolkit.calibration:run_calibration",
    "validate_reference": "crucible.toolkit.validation:run_reference_checks",
}

TRUSTED_JOBS: frozenset[str] = frozenset({"evaluate", "compile", "calibrate", "validate_reference"})

LANDLOCK_IN_CHILD: frozenset[str] = frozenset({"ncu"})
"""Jobs whose untrusted code runs in a child process that restricts its own filesystem (payload key
`landlock_writable`) instead of inheriting the worker's Landlock domain. Under Nsight Compute the candidate
runs in a grandchild of the worker, and the CUDA driver there must write its own /proc/<pid>/task, which a
rule made in the worker (naming the worker's pid) does not allow: CUDA would fail with error 304."""
