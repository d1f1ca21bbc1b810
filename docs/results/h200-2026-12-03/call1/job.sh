#!/usr/bin/env bash
# Call 1 (commit 2eb1ee0): build, the GPU tests of the newest commits, ctest, then compute-sanitizer over whole-program runs.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c1; mkdir -p $O
trap 'exit 124' TERM
trap 'cd $OUT && tar czf c1.tgz c1 && rm -rf c1' EXIT
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
git log --oneline -1 2>/dev/null || true
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:" | tail -30
el "built"
for t in test_cuda_graph test_mixed_precision test_optimizer test_flash_attention; do
  timeout 240 build/tests/$t --gtest_brief=1 >$O/$t.log 2>&1
  echo "$t rc $?: $(grep -E '^\[  (PASSED|FAILED) |Failure|Expected|Which is|exception|tests ran' $O/$t.log | head -12 | tr '\n' ' ')"
done
el "tests"
(cd build && timeout 200 ctest -j12 --timeout 180 -E 'bf16_wire_curve|train_bad_input|train_stall|train_resume|curve|signal_stop|data_at_risk' >$O/ctest.log 2>&1)
grep -E "tests passed|\(Failed\)|\(Timeout\)|Total Test" $O/ctest.log | tail -12
el "ctest"
SANITIZE_TIMEOUT=250 scripts/gpu-job.sh $O/s whole-sanitize 2>&1 | grep -v "^ln:"
el "sanitize"
