#!/usr/bin/env bash
# Ready an offline GPU machine and run the GPU test suite, the task validation, the benchmarks and a scripted
# run there.
#
#   scripts/fetch-gpu-wheels.sh                      # here, once: wheels the GPU image lacks -> .whl/
#   scripts/gpu-check.sh [STEP,STEP,...] [-- pytest args...]   # there (device tool: carry .whl)
#
# Steps (default: all, in this order):
#   validate  crucible tasks validate --jobs 3 on every task (or $TASKS) -> benchmarks/results/validation.md
#   calibrate crucible calibrate (not in the default list: it changes the ceilings later steps use)
#   tests     pytest -m gpu (the per-task expert/baseline tests are left to `validate` unless FULL=1)
#   bench     timing repeatability and accuracy, tool turnaround, the MCP round trip
#   integrity the runtime defences' cost on every expert solution, and their false alarms (none expected)
#   profiler  what a profiler session costs in a fresh worker, and a cProfile of one evaluation
#   mcp       the MCP round trip alone (get_task over stdio; what run_tests adds over the engine), and the
#             agent's inner loop: compile and run_tests on softmax's expert, back to back and 5 s apart,
#             with every call's phases (benchmarks/inner_loop.py)
#   judge     the judge/runner split: tests/test_gpu.py without the per-task tests, then the timer's
#             repeatability and agreement with ncu and with the judge (benchmarks/judged_timing.py)
#   redteam   every red-team cheat scored on the GPU (tests/test_redteam.py -m gpu; PART=i/n for a slice)
#   scale     the placement, Ray and worker GPU tests, and the reward service's verdicts per minute
#   final     final scoring of every expert solution: verdicts, false alarms, time against before
#             (benchmarks/final_scoring.py; TASKS=... for a part; figures merge across calls)
#   cute      the torch2cute tasks: the CuTe DSL put together from the parts under .dsl/cute-* (carried in
#             earlier calls: scripts/fetch-dsl-wheels.sh), then crucible tasks validate on them
#             -> benchmarks/results/validation-cute.md (with the DSL's parts present, every step sees it)
#   tilelang  the torch2tilelang tasks: TileLang put together from .dsl/tilelang-* (carried in earlier calls),
#             then crucible tasks validate on them -> benchmarks/results/validation-tilelang.md (needs nvcc)
#   run       crucible run --no-sandbox --suite core (the scripted expert plan), and its report; the run
#             folder comes back as $OUT/gpu-run.tgz, and RESUME=1 resumes it when carried as crucible-runs/gpu
# Each step runs under `timeout $STEP_TIMEOUT` (default 540 s). Logs and figures land in benchmarks/results/
# and, when $OUT is set, as $OUT/gpu-results.tgz (the device tool returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
steps=${1:-validate,tests,bench,run}; shift || true
[[ ${1:-} == -- ]] && shift
site=/tmp/crucible-site
logs=benchmarks/results/logs
mkdir -p "$logs"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
  || { echo "installing the wheels failed: run scripts/fetch-gpu-wheels.sh first and carry .whl"; exit 3; }
# The crucible.* namespace maps onto the repo's folders, as the editable install does.
mkdir -p "$site/crucible"
for pkg in toolkit server harness; do ln -sfn "$repo/$pkg" "$site/crucible/$pkg"; done
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# The CuTe DSL, when its parts were carried: into a folder named site-packages (runners may read those,
# toolkit/sandbox.py runner_readable); its .pth file is not read from PYTHONPATH, so its packages folder is
# put there by hand.
dsl=/tmp/crucible-dsl/site-packages
if compgen -G ".dsl/cute-*/*.piece-00" > /dev/null && [[ ! -d $dsl/nvidia_cutlass_dsl ]]; then
  mkdir -p /tmp/crucible-dsl/wheels "$dsl"
  for piece in .dsl/cute-*/*.piece-00; do
    wheel=$(basename "${piece%.piece-00}")
    [[ $wheel == cuda_tile-* ]] && continue
    for f in .dsl/cute-*/"$wheel".piece-*; do echo "${f##*.piece-} $f"; done | sort -n | cut -d' ' -f2 | xargs cat \
      > "/tmp/crucible-dsl/wheels/$wheel"
  done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$dsl" /tmp/crucible-dsl/wheels/*.whl \
    || echo "installing the CuTe DSL from .dsl failed: the torch2cute tasks cannot run"
fi
# TileLang, when its parts were carried (.dsl/tilelang-*), into the same folder.
if compgen -G ".dsl/tilelang-*/*.piece-00" > /dev/null && [[ ! -d $dsl/tilelang ]]; then
  mkdir -p /tmp/crucible-dsl/tl-wheels "$dsl"
  for piece in .dsl/tilelang-*/*.piece-00; do
    wheel=$(basename "${piece%.piece-00}")
    for f in .dsl/tilelang-*/"$wheel".piece-*; do echo "${f##*.piece-} $f"; done | sort -n | cut -d' ' -f2 | xargs cat \
      > "/tmp/crucible-dsl/tl-wheels/$wheel"
  done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$dsl" /tmp/crucible-dsl/tl-wheels/*.whl \
    || echo "installing TileLang from .dsl failed: the torch2tilelang tasks cannot run"
fi
[[ -d $dsl/nvidia_cutlass_dsl ]] && export PYTHONPATH="$dsl:$dsl/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH"
[[ -d $dsl/tilelang && ! -d $dsl/nvidia_cutlass_dsl ]] && export PYTHONPATH="$dsl:$PYTHONPATH"
export CRUCIBLE_CACHE=${CRUCIBLE_CACHE:-/tmp/crucible-cache}
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "gpu", torch.cuda.get_device_name(0))'
limit=${STEP_TIMEOUT:-540}
crucible() { python3 -m crucible.harness.cli "$@"; }
step() {  # step NAME CMD...: run under the time limit, log to $logs/NAME.log, remember failures
  local name=$1; shift
  echo "== $name ($(date +%T))"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$logs/$name.log"
  local code=${PIPESTATUS[0]}
  # A step killed at its limit can leave servers and workers behind (they run in sessions of their own);
  # they would hold the GPU and disturb every later step.
  pkill -9 -f 'crucible.toolkit.worker_main|crucible.toolkit.runner.main|crucible.harness.cli serve' 2>/dev/null || true
  echo "== $name: exit $code"
  [[ $code == 0 ]] || rc=1
}
rc=0
for s in ${steps//,/ }; do
  case $s in
    validate)
      # shellcheck disable=SC2086
      step validate python3 -m crucible.harness.cli tasks validate ${TASKS:-} --jobs "${JOBS:-3}" \
        --table benchmarks/results/validation.md ;;
    cute)  # the torch2cute tasks; needs the DSL (above): say so rather than fail every task for it
      # shellcheck disable=SC2086
      if python3 -c 'import cutlass.cute, cuda.bindings.driver' 2>"$logs/cute-import.log"; then
        python3 -c 'import cutlass; print("cutlass-dsl", cutlass.__version__)' || true
        step validate-cute python3 -m crucible.harness.cli tasks validate ${TASKS:-torch2cute/rmsnorm \
          torch2cute/silu_and_mul torch2cute/fused_add_rmsnorm torch2cute/rope} --jobs 1 \
          --table benchmarks/results/validation-cute.md
      else
        echo "the CuTe DSL does not import (carry every .dsl/cute-* part first: scripts/fetch-dsl-wheels.sh):"
        cat "$logs/cute-import.log"; rc=1
      fi ;;
    tilelang)  # the torch2tilelang tasks; needs TileLang (above) and nvcc
      # shellcheck disable=SC2086
      if python3 -c 'import tilelang' 2>"$logs/tilelang-import.log" && command -v nvcc > /dev/null; then
        python3 -c 'import tilelang; print("tilelang", tilelang.__version__)' || true
        nvcc --version | tail -2
        step validate-tilelang python3 -m crucible.harness.cli tasks validate ${TASKS:-torch2tilelang/rmsnorm \
          torch2tilelang/silu_and_mul torch2tilelang/fused_add_rmsnorm torch2tilelang/rope} --jobs 1 \
          --table benchmarks/results/validation-tilelang.md
      else
        echo "TileLang does not import, or nvcc is not on PATH (carry .dsl/tilelang-1 and .dsl/tilelang-2 first):"
        command -v nvcc || echo "no nvcc on PATH"
        cat "$logs/tilelang-import.log"; rc=1
      fi ;;
    calibrate)  # measured ceilings replace the built-in table for every later step on this machine
      step calibrate python3 -m crucible.harness.cli calibrate --json ;;
    tests)
      select=()
      [[ ${FULL:-0} == 1 ]] || select=(-k "not expert_solution_is_correct and not baseline_is_correct")
      step gpu-tests python3 -m pytest -n 0 -m gpu -q -rP -p no:cacheprovider "${select[@]}" "$@" tests ;;
    judge)
      step gpu-judge-tests python3 -m pytest -n 0 -m gpu -q -rP -p no:cacheprovider tests/test_gpu.py \
        -k "not expert_solution_is_correct and not baseline_is_correct" "$@"
      step judged-timing python3 benchmarks/judged_timing.py --repeats "${REPEATS:-3}" ;;
    redteam)  # PART=i/n: the i-th of n slices of the cheats (one serial pass of all of them takes ~24 min)
      cheats=(tests/test_redteam.py)
      if [[ -n ${PART:-} ]]; then
        mapfile -t cheats < <(python3 -m pytest -n 0 -m gpu -q --collect-only -p no:cacheprovider \
          tests/test_redteam.py | grep '::' | awk -v i="${PART%/*}" -v n="${PART#*/}" '(NR - 1) % n == i - 1')
      fi
      # Each verdict is written as soon as it is known (a slice cut by its time limit keeps what it scored).
      CRUCIBLE_REDTEAM_LOG=${OUT:-$PWD/$logs}/redteam-verdicts.txt \
        step gpu-redteam python3 -m pytest -n 0 -m gpu -q -rfEP --tb=short -p no:cacheprovider "${cheats[@]}" "$@" ;;
    scale)  # issue 16: placement, Ray and worker tests on the GPU, and the reward service's verdicts per minute
      step gpu-scale-tests python3 -m pytest -n 0 -m gpu -q -rP -p no:cacheprovider tests/test_placement.py \
        tests/test_ray_scoring.py tests/test_worker.py "$@"
      step reward-service python3 benchmarks/reward_service.py --n "${N:-6}" --gpus 1 --settle 3 ;;
    final)
      # shellcheck disable=SC2086
      step final-scoring python3 benchmarks/final_scoring.py ${TASKS:+--tasks $TASKS} ;;
    integrity)  # what the runtime defences cost on the experts, and that none fires on them
      step integrity-cost python3 benchmarks/integrity_cost.py "$@" ;;
    profiler)
      step profiler-cost python3 benchmarks/profiler_cost.py ;;
    mcp)
      step bench-mcp python3 benchmarks/mcp_roundtrip.py "$@"
      step bench-inner-loop python3 benchmarks/inner_loop.py
      step bench-inner-loop-gap python3 benchmarks/inner_loop.py --gap 5 ;;
    bench)
      step bench-repeatability python3 benchmarks/timing_repeatability.py
      step bench-accuracy python3 benchmarks/timing_accuracy.py
      step bench-turnaround python3 benchmarks/tool_turnaround.py --tasks triton2triton/softmax cuda2cuda/rmsnorm \
        torch2triton/silu_and_mul
      step bench-mcp python3 benchmarks/mcp_roundtrip.py
      step bench-inner-loop python3 benchmarks/inner_loop.py ;;
    run)  # RESUME=1 goes on with a run folder carried back from an earlier call (crucible-runs/gpu)
      run_dir=crucible-runs/gpu
      resume=()
      if [[ ${RESUME:-0} == 1 ]]; then resume=(--resume); else rm -rf "$run_dir"; fi
      step run python3 -m crucible.harness.cli run --no-sandbox --suite "${SUITE:-core}" \
        --concurrency "${JOBS:-3}" --out "$run_dir" "${resume[@]}"
      crucible report "$run_dir" --json > benchmarks/results/scripted_run_report.json 2>>"$logs/run.log"
      crucible report "$run_dir" > benchmarks/results/scripted_run_report.txt 2>>"$logs/run.log"
      [[ -n ${OUT:-} ]] && tar czf "$OUT/gpu-run.tgz" "$run_dir" ;;
    *) echo "unknown step $s (validate, cute, tilelang, calibrate, tests, judge, redteam, scale, final, integrity, profiler, mcp, run)"; rc=2 ;;
  esac
done
[[ -n ${OUT:-} ]] && tar czf "$OUT/gpu-results.tgz" benchmarks/results
exit $rc
