#!/usr/bin/env bash
# Every test: install what is missing, build, run the whole ctest suite (CUDA tests skip without a GPU;
# distributed tests run under mpirun -np 2 and -np 3). Then, as a user would: install minidp into a
# temporary prefix, build examples/custom_layer against that installation alone, and run its tests (the
# RMSNorm layer with minidp::testing, and a 2-rank training run whose loss must fall).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
scripts/install-deps.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" "$@")

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install build --prefix "$scratch/prefix" >/dev/null
cmake -S examples/custom_layer -B "$scratch/example" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/example" -j"$(nproc)"
(cd "$scratch/example" && ctest --output-on-failure)
