#!/usr/bin/env bash
# Download the kernel languages the GPU image lacks (CuTe DSL, TileLang, cuTile) for CPython 3.12 x86-64, and
# split them into parts under .dsl/, each small enough to travel in one device call (64 MiB a call: the CuTe
# DSL's CUDA 13 library wheel alone is 92 MiB). scripts/dsl-probe.sh puts the pieces together there.
# TileLang's own imports beyond torch and numpy (tilelang 0.1.15's Requires-Dist) come with it: apache-tvm-ffi,
# z3-solver, torch-c-dlpack-ext, cloudpickle, ml-dtypes, tqdm, psutil. It compiles with nvcc from PATH.
#
#   scripts/fetch-dsl-wheels.sh                      # here, once
#   device call: carry .dsl/cute-1, run `true`       # a carried part stays on the warm machine (ignored
#   device call: carry .whl and .dsl/cute-2, run `bash scripts/gpu-check.sh cute`   # paths are kept between
#                                                    # calls); a 56 MiB part leaves no room for .whl beside it
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .dsl && mkdir -p .dsl/wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .dsl/wheels \
  nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
  "cuda-bindings>=13.0,<14" "cuda-pathfinder>=1.4.2" \
  tilelang==0.1.15 "apache-tvm-ffi>=0.1.11,<0.1.13" "z3-solver>=4.13.0,<4.15.5" torch-c-dlpack-ext \
  cloudpickle==3.1.3 ml-dtypes==0.7.0 tqdm==4.70.1 psutil==7.2.2 \
  cuda-tile==1.7.0
(cd .dsl/wheels && for w in *.whl; do split -b 28M -d -a 2 "$w" "$w.piece-" && rm "$w"; done)
# Per language, every wheel cut into 28 MiB pieces, packed into parts of at most 56 MiB (a device call
# carries 64 MiB with the working tree): .dsl/cute-N (CuTe DSL, with cuTile), .dsl/tilelang-N.
python3 - <<'PY'
import shutil
from pathlib import Path

wheels = Path(".dsl/wheels")
languages = {"cute": ("nvidia_cutlass", "cuda_tile", "cuda_bindings", "cuda_pathfinder"), "tilelang": ("tilelang", "apache_tvm", "z3_solver", "torch_c", "cloudpickle", "ml_dtypes", "tqdm", "psutil")}
for lang, prefixes in languages.items():
    pieces = sorted((p for p in wheels.iterdir() if p.name.startswith(prefixes)), key=lambda p: -p.stat().st_size)
    parts: list[list[Path]] = []
    for piece in pieces:  # first fit, largest first
        size = piece.stat().st_size
        part = next((b for b in parts if sum(q.stat().st_size for q in b) + size <= 56 << 20), None)
        if part is None:
            parts.append(part := [])
        part.append(piece)
    for n, part in enumerate(parts, 1):
        folder = Path(f".dsl/{lang}-{n}")
        folder.mkdir()
        for piece in part:
            shutil.move(piece, folder / piece.name)
left = list(wheels.iterdir())
assert not left, f"pieces of no language: {left}"
wheels.rmdir()
PY
du -sh .dsl/*
grep -qx '/.dsl/' .gitignore || echo "/.dsl/" >> .gitignore
