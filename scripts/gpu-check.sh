#!/usr/bin/env bash
# Ready an offline GPU machine and run the GPU test suite and the benchmarks there.
#
#   scripts/fetch-gpu-wheels.sh          # here, once: wheels for what the GPU image lacks -> .whl/
#   scripts/gpu-check.sh [tests|bench|all] [pytest args...]   # there (device tool: carry .whl)
#
# Figures land in benchmarks/results/ and, when $OUT is set, are copied there too.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
what=${1:-all}; shift || true
site=/tmp/crucible-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
  || { echo "installing the wheels failed: run scripts/fetch-gpu-wheels.sh first and carry .whl"; exit 3; }
# The crucible.* namespace maps onto the repo's folders, as the editable install does.
mkdir -p "$site/crucible"
for pkg in toolkit server harness; do ln -sfn "$repo/$pkg" "$site/crucible/$pkg"; done
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export CRUCIBLE_CACHE=/tmp/crucible-cache
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "gpu", torch.cuda.get_device_name(0))'
rc=0
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest -m gpu -q -p no:cacheprovider "$@" tests 2>&1 | tee /tmp/gpu-tests.log || rc=1
  [[ -n ${OUT:-} ]] && cp /tmp/gpu-tests.log "$OUT/gpu-tests.log"
fi
if [[ $what == bench || $what == all ]]; then
  for b in benchmarks/timing_repeatability.py benchmarks/timing_accuracy.py benchmarks/tool_turnaround.py; do
    echo "== $b"; python3 "$b" || rc=1
  done
  [[ -n ${OUT:-} ]] && cp benchmarks/results/*.json "$OUT/" 2>/dev/null
fi
exit $rc
