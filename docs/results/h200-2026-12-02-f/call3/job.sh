#!/usr/bin/env bash
# Call 3: working tree (bf16 compute copies written by the optimizer) against main 9eca4b9 (.gpu-src/base).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c3; mkdir -p $O
trap 'exit 124' TERM
trap 'cd $OUT && tar czf c3.tgz --exclude=tokens --exclude=tokens32k c3 && rm -rf c3' EXIT
deps=$PWD/.deps/root
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
( cd .gpu-src/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >$O/base_cmake.log 2>&1 && cmake --build build -j4 --target minidp-bench >$O/base_build.log 2>&1; echo "base build rc $?" ) &
mb=$!
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:" | tail -30
el "built"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null; $py scripts/make-random-tokens.py $O/tokens32k 32000 >/dev/null
for t in test_optimizer test_mixed_precision; do
  echo "$t: $(build/tests/$t --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|rror|tests ran' | head -16 | tr '\n' ' ')"
done
(cd build && ctest -j12 --timeout 300 -E 'bf16_wire_curve|train_bad_input|train_stall|train_resume|curve|signal_stop|data_at_risk' >$O/ctest.log 2>&1)
grep -E "tests passed|\(Failed\)|\(Timeout\)|Total Test" $O/ctest.log | tail -12
el "tests"
wait $mb
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
shape=(--layers 12 --embd 1024 --heads 8 --kv-heads 4 --hidden 2816 --context 1024)
llama=(--model llama "${shape[@]}" --data llmc --llmc-train $O/tokens32k/train.bin --llmc-val $O/tokens32k/val.bin
       --device cuda --optimizer adamw --batch-size 8 --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
row() { grep -E '^ +high' $1 | awk '{print $5, $6, "peak", $(NF-1)}' | tr '\n' ' '; }
for r in 1 2; do
  for v in base new; do
    bin=build/bin/minidp-bench; [ $v = base ] && bin=.gpu-src/base/build/bin/minidp-bench
    $bin "${gpt2[@]}" --batch-size 16 --json $O/${v}_b16_$r.json >$O/${v}_b16_$r.txt 2>&1
    echo "$v b16 r$r: $(row $O/${v}_b16_$r.txt) $(grep -m1 rror $O/${v}_b16_$r.txt)"
  done
done
for v in base new; do
  bin=build/bin/minidp-bench; [ $v = base ] && bin=.gpu-src/base/build/bin/minidp-bench
  $bin "${gpt2[@]}" --batch-size 8 --json $O/${v}_b8.json >$O/${v}_b8.txt 2>&1; echo "$v b8: $(row $O/${v}_b8.txt)"
  $bin "${llama[@]}" --json $O/${v}_llama.json >$O/${v}_llama.txt 2>&1; echo "$v llama: $(row $O/${v}_llama.txt)"
done
el "minidp benches"
$py train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --dtype bf16 \
  --compile on --attention sdpa --batch-size 16 --steps 20 --warmup 5 --device cuda --json $O/torch_gpt2_b16.json >$O/torch_gpt2_b16.txt 2>&1
echo "compile gpt B16:"; grep -E "ceiling|pytorch|rror" $O/torch_gpt2_b16.txt | tail -3
el "end"
