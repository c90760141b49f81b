#!/usr/bin/env bash
# On the GPU machine: put the pieces carried under .dsl/ (scripts/fetch-dsl-wheels.sh) back into wheels,
# install them beside the image's packages, and run one small kernel in each new language (a vector add,
# checked against torch). Prints what ran and what failed, and why; exits 0 either way (it is a probe).
#
#   bash scripts/dsl-probe.sh cute|tilelang
set -uo pipefail
cd "$(dirname "$0")/.."
lang=${1:?which language: cute or tilelang}
site=/tmp/dsl-site
mkdir -p /tmp/dsl-wheels
for piece in .dsl/"$lang"-*/*.piece-00; do
  wheel=$(basename "${piece%.piece-00}")
  for f in .dsl/"$lang"-*/"$wheel".piece-*; do echo "${f##*.piece-} $f"; done | sort -n | cut -d' ' -f2 \
    | xargs cat \
    > "/tmp/dsl-wheels/$wheel"
done
ls -la /tmp/dsl-wheels
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" /tmp/dsl-wheels/*.whl \
  || { echo "installing the $lang wheels failed"; exit 0; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# A .pth file is not read from PYTHONPATH: the CuTe DSL's own packages folder goes there by hand.
PYTHONPATH=$site:$site/nvidia_cutlass_dsl/dsl_packages python3 scripts/dsl_probe.py "$lang"
exit 0
