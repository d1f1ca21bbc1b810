#!/usr/bin/env bash
# Every test: install what is missing, build, run the whole ctest suite (CUDA tests skip without a GPU;
# distributed tests run under mpirun -np 2 and -np 3).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
