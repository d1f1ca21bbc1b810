#!/usr/bin/env bash
# The main job on a fresh Debian machine: install what is missing, build, and train the default model
# data-parallel over every GPU (one rank each), or over 2 CPU ranks where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
gpus=0
command -v nvidia-smi >/dev/null && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$gpus" -gt 0 ]; then
  exec mpirun -np "$gpus" --oversubscribe build/bin/minidp-train --model mlp --device cuda "$@"
else
  exec mpirun -np 2 --oversubscribe build/bin/minidp-train --model mlp --device cpu "$@"
fi
