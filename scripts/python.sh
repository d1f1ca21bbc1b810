#!/usr/bin/env bash
# Prints the Python interpreter that minidp's tests and scripts run: $MINIDP_PYTHON where it is set, else the
# one CMake chose and checked for numpy, torch and safetensors when it configured the build folder
# (cmake/MinidpPython.cmake; -DMINIDP_PYTHON=... picks another). Usage: scripts/python.sh [BUILD_DIR] (default:
# $BUILD, else build/ of the checkout).
set -euo pipefail
if [ -n "${MINIDP_PYTHON:-}" ]; then
  echo "$MINIDP_PYTHON"
  exit 0
fi
build=${1:-${BUILD:-$(dirname "$0")/../build}}
python=$(sed -n 's/^MINIDP_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [ -z "$python" ]; then
  echo "scripts/python.sh: no MINIDP_PYTHON in $build/CMakeCache.txt: configure that build first (scripts/build.sh)" >&2
  exit 1
fi
echo "$python"
