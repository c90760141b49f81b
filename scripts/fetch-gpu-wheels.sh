#!/usr/bin/env bash
# Download, on a machine with a package registry, the wheels an offline GPU node needs (CPython 3.12,
# x86-64 Linux) into .whl/. scripts/gpu-check.sh installs them there with --no-index.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
grep -v '^#' scripts/gpu-wheels.txt | grep . | xargs python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 -d .whl
ls .whl | wc -l
