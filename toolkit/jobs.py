"""What an evaluation worker can be asked to do: job name -> "module:function".

Each function takes `(payload: dict, progress: Callable[[dict], None]) -> dict` and runs inside the
sandboxed worker (toolkit/worker_main.py), never in the server. Tests may add entries of their own.
"""

JOBS: dict[str, str] = {
    "evaluate": "crucible.toolkit.runtime:run_evaluation",
    "triton_build": "crucible.toolkit.runtime:run_triton_build",
    "ncu": "crucible.toolkit.ncu:run_ncu_job",
    "calibrate": "crucible.toolkit.calibration:run_calibration",
    "validate_reference": "crucible.toolkit.validation:run_reference_checks",
}
