#!/usr/bin/env bash
# Call 2: working tree (tuned cuBLASLt plans + DGELU_BGRAD) against main 9eca4b9 (.gpu-src/base), tests.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c2; mkdir -p $O
trap 'exit 124' TERM
trap 'cd $OUT && tar czf c2.tgz --exclude=tokens --exclude=tokens32k c2 && rm -rf c2' EXIT
deps=$PWD/.deps/root
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
( cd .gpu-src/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >$O/base_cmake.log 2>&1 && cmake --build build -j4 --target minidp-bench >$O/base_build.log 2>&1; echo "base build rc $?" ) &
mb=$!
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:" | tail -30
el "built"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null
for t in test_mixed_precision test_loop; do
  echo "$t: $(build/tests/$t --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|rror|tests ran' | head -16 | tr '\n' ' ')"
done
el "unit tests"
wait $mb
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25 --batch-size 16)
for r in 1 2; do
  for v in base new heur; do
    bin=build/bin/minidp-bench; extra=()
    [ $v = base ] && bin=.gpu-src/base/build/bin/minidp-bench
    [ $v = heur ] && extra=(--heuristic-gemms)
    $bin "${gpt2[@]}" "${extra[@]}" --json $O/${v}_b16_$r.json >$O/${v}_b16_$r.txt 2>&1
    echo "$v r$r: $(grep -E '^ +high' $O/${v}_b16_$r.txt | awk '{print $5, $6}' | tr '\n' ' ') $(grep -E 'tuned at first|rror' $O/${v}_b16_$r.txt)"
  done
done
el "benches"
(cd build && ctest -j12 --timeout 300 -E 'bf16_wire_curve|train_bad_input|train_stall|train_resume|curve|signal_stop|data_at_risk' >$O/ctest.log 2>&1)
grep -E "tests passed|\(Failed\)|\(Timeout\)|Total Test" $O/ctest.log | tail -12
el "ctest"
