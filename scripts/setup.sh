#!/usr/bin/env bash
# Set up a virtual environment in .venv with crucible and its development tools.
# torch is pinned to a CPU build for machines without a GPU (an open range pulls a multi-GB CUDA build);
# on a GPU machine, install the torch build that matches its CUDA first and pass --keep-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
pip=".venv/bin/pip"
$pip install -q --upgrade pip >/dev/null
if [[ ${1:-} != --keep-torch ]]; then
  $pip install -q "torch==2.13.0" "triton==3.6.0"
fi
$pip install -q -e ".[dev]"
.venv/bin/crucible --help >/dev/null && echo "set up: .venv/bin/crucible is ready"
