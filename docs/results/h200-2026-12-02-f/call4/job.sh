#!/usr/bin/env bash
# Call 4: the working tree's new tests, then compute-sanitizer over short whole-program runs.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c4; mkdir -p $O
trap 'exit 124' TERM
trap 'cd $OUT && tar czf c4.tgz c4 && rm -rf c4' EXIT
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:" | tail -30
el "built"
for t in test_mixed_precision test_optimizer; do
  build/tests/$t --gtest_brief=1 >$O/$t.log 2>&1
  echo "$t: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|exception|tests ran' $O/$t.log | head -16 | tr '\n' ' ')"
done
el "tests"
SANITIZE_TIMEOUT=360 scripts/gpu-job.sh $O/s whole-sanitize 2>&1 | grep -v "^ln:"
el "sanitize"
