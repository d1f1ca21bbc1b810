#!/usr/bin/env bash
# main 0433312: the CrossEntropyCuda test, then compute-sanitizer memcheck, initcheck and racecheck over 3-step
# minidp-train runs (GPT and llama, fp32 and bf16, eager and --cuda-graph: gpu-job.sh whole-sanitize).
set -uo pipefail
O=$OUT/c; mkdir -p $O
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:"
el "built"
build/tests/test_linalg --gtest_filter='*CrossEntropyCuda*' 2>&1 | grep -vE "^\[ *(RUN|OK) " | tail -8
el "test"
SANITIZE_TIMEOUT=${ST:-400} scripts/gpu-job.sh $O/s whole-sanitize 2>&1 | grep -v "^ln:"
el "sanitized"
for f in $O/s/whole_*.log; do grep -m3 -E "^========= (Invalid|Uninitialized|Race|Error)|Program hit" $f | sed "s|^|$(basename $f .log): |"; done | head -30
tar czf $OUT/c.tgz -C $OUT c
