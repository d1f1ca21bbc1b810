#!/usr/bin/env bash
# The shape grid in one command (tools/shape_grid.py): minidp-bench beside the PyTorch anchor (torch.compile
# default and max-autotune-no-cudagraphs, fused AdamW, SDPA, autocast bf16) on GPT and LLaMA-family shapes, and
# minidp-bench-attention beside SDPA on their attention. Run from anywhere after scripts/build.sh; OUT gets
# grid.md, grid.json, grid.png, grid.log and logs.tgz. Extra arguments go to tools/shape_grid.py (--help).
# Usage: scripts/shape-grid.sh OUT [--no-max-autotune] [--budget-s 420] [--shapes a,b] [--gpus N] ...
#        scripts/shape-grid.sh OUT --smoke --build build-cpu      # tiny shapes on the CPU
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/shape-grid.sh OUT [tools/shape_grid.py options]" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0
python=${MINIDP_PYTHON:-$(scripts/python.sh "${BUILD:-build}" 2>/dev/null || command -v python3)}
exec "$python" tools/shape_grid.py "$@"
