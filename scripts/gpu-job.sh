#!/usr/bin/env bash
# A device job on a lent GPU machine (no network there): link the carried Debian packages
# (.deps/root, made here by `apt-get download libcli11-dev nlohmann-json3-dev dataset-fashion-mnist fortunes
# fortunes-min` and `dpkg -x` each into .deps/root), build with CUDA, then run the named steps.
# Usage: scripts/gpu-job.sh OUTDIR STEP...   (steps: build test sanitize fast-step train-fortunes ...)
set -uo pipefail
out=${1:?usage: gpu-job.sh OUTDIR STEP...}
shift
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deps=$PWD/.deps/root
mkdir -p /usr/share/datasets /usr/share/games
[ -e /usr/share/datasets/fashion-mnist ] || ln -s "$deps/usr/share/datasets/fashion-mnist" /usr/share/datasets/
[ -e /usr/share/games/fortunes ] || ln -s "$deps/usr/share/games/fortunes" /usr/share/games/
gpus=$(nvidia-smi -L | grep -c '^GPU')

step_build() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >"$out/cmake.log" 2>&1 &&
    cmake --build build -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; return 1; }
  echo "build ok"
}
step_test() {
  (cd build && ctest -j8 --output-on-failure --timeout 600 >"$out/ctest.log" 2>&1)
  grep -E "tests passed|FAILED|Failed|\*\*\*" "$out/ctest.log" | tail -25
}
step_sanitize() {
  for t in build/tests/test_linalg build/tests/test_transformer_ops; do
    [ -x "$t" ] || continue
    for tool in memcheck racecheck; do
      compute-sanitizer --tool "$tool" --error-exitcode 3 "$t" --gtest_brief=1 >"$out/sanitize_$(basename "$t")_$tool.log" 2>&1
      echo "compute-sanitizer $tool $(basename "$t"): rc $? ($(grep -c 'ERROR SUMMARY: 0' "$out/sanitize_$(basename "$t")_$tool.log") clean summaries)"
    done
  done
}
for s in "$@"; do
  echo "== $s ($(date -u +%T))"
  "step_$s"
done
