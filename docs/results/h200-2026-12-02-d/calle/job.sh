#!/usr/bin/env bash
# main b50f89d: the cross-entropy tests only (a short call: the targets they need).
set -uo pipefail
O=$OUT/e; mkdir -p $O
deps=$PWD/.deps/root
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$deps/usr" >$O/cmake.log 2>&1 && cmake --build build -j16 --target test_linalg test_classifier test_gpt_loss >$O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
el "built"
build/tests/test_linalg --gtest_filter='*CrossEntropy*' 2>&1 | grep -vE "^\[ *(RUN|OK) " | tail -12
for t in test_classifier test_gpt_loss; do echo "$t: $(build/tests/$t --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure' | head -6 | tr '\n' ' ')"; done
el "end"
