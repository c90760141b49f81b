#!/usr/bin/env bash
# Set up a virtual environment in .venv with crucible and its development tools.
# torch is pinned to a CPU build for machines without a GPU (an open range pulls a multi-GB CUDA build);
# on a GPU machine, install the torch build that matches its CUDA first and pass --keep-torch.
# One line per step on stdout; what pip says goes to .venv/setup.log, shown only when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
log=.venv/setup.log

step() {  # $1: what the step does, for the reader; the rest: the command
  echo "setup: $1"
  if ! "${@:2}" >>"$log" 2>&1; then
    echo "setup: failed: $1; the end of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}

echo "setup: creating .venv with $(python3 --version 2>&1)"
python3 -m venv .venv
: >"$log"
pip=".venv/bin/pip"
step "upgrading pip" "$pip" install --upgrade pip
if [[ ${1:-} != --keep-torch ]]; then
  step "installing torch 2.13.0 (CPU build) and triton 3.6.0 (the long step: a few minutes on a fresh machine)" \
    "$pip" install "torch==2.13.0" "triton==3.6.0"
else
  echo "setup: keeping the installed torch (--keep-torch)"
fi
# ray: the optional extra the Ray tests need (crucible run --ray, the reward service on a local cluster).
step "installing crucible (editable), its dev tools (pytest, ruff) and Ray" "$pip" install -e ".[dev,ray]"
step "checking the crucible command" .venv/bin/crucible --help
echo "set up: .venv/bin/crucible is ready (pip's output: $log)"
