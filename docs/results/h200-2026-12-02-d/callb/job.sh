#!/usr/bin/env bash
# build/: the working tree (main 550b6de: 541ee21's held cross-entropy rows + the one-pass norm backward);
# .gpu-src/xent: 541ee21 (minidp-bench, minidp-bench-kernels), the same-job baseline.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/b; mkdir -p $O
deps=$PWD/.deps/root
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
( cd .gpu-src/xent && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >$O/base_cmake.log 2>&1 && cmake --build build -j5 --target minidp-bench minidp-bench-kernels >$O/base_build.log 2>&1; echo "base build rc $?" ) &
mb=$!
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:"
el "built"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null; $py scripts/make-random-tokens.py $O/tokens32k 32000 >/dev/null
build/tests/test_linalg --gtest_filter='*CrossEntropyCuda*' 2>&1 | grep -vE "^\[ *(RUN|OK) " | head -30
set -f
for spec in "test_fused_ops *" "test_transformer_ops *" "test_reference *" "test_bf16_step *" "test_mixed_precision *" "test_composite_ops *" "test_sequence_ops *" "test_classifier *"; do
  set -- $spec; echo "$1: $(build/tests/$1 --gtest_filter="$2" --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|tests ran' | head -12 | tr '\n' ' ')"
done; set +f
el "unit tests"
(cd build && ctest -j12 --timeout 300 -E 'bf16_wire_curve|train_bad_input|train_stall|train_resume|curve|signal_stop|data_at_risk' >$O/ctest.log 2>&1)
grep -E "tests passed|\(Failed\)|\(Timeout\)|Total Test" $O/ctest.log | tail -12
el "ctest"
wait $mb
for v in base next; do
  bk=build/bin/minidp-bench-kernels; [ $v = base ] && bk=.gpu-src/xent/build/bin/minidp-bench-kernels
  echo "$v kernels:"; $bk 2>&1 | grep -E "layerNorm|crossEntropy|^kernel" | tee $O/${v}_kernels.txt
done
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
shape=(--layers 12 --embd 1024 --heads 8 --kv-heads 4 --hidden 2816 --context 1024)
llama=(--model llama "${shape[@]}" --data llmc --llmc-train $O/tokens32k/train.bin --llmc-val $O/tokens32k/val.bin
       --device cuda --optimizer adamw --batch-size 8 --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
for r in 1 2; do
  for v in base next; do
    bin=build/bin/minidp-bench; [ $v = base ] && bin=.gpu-src/xent/build/bin/minidp-bench
    $bin "${gpt2[@]}" --batch-size 16 --json $O/${v}_b16_$r.json >$O/${v}_b16_$r.txt 2>&1
    echo "$v gpt b16 r$r"; tail -3 $O/${v}_b16_$r.txt | head -2
  done
done
build/bin/minidp-bench "${gpt2[@]}" --batch-size 16 --cuda-graph --json $O/next_b16_graph.json >$O/next_b16_graph.txt 2>&1
echo "next gpt b16 graph"; tail -3 $O/next_b16_graph.txt | head -2
build/bin/minidp-bench "${gpt2[@]}" --batch-size 8 --json $O/next_b8.json >$O/next_b8.txt 2>&1; echo "next gpt b8"; tail -3 $O/next_b8.txt | head -2
build/bin/minidp-bench "${llama[@]}" --json $O/next_llama.json >$O/next_llama.txt 2>&1; echo "next llama b8"; tail -3 $O/next_llama.txt | head -2
el "minidp benches"
$py train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --dtype bf16 \
  --compile on --attention sdpa --batch-size 16 --steps 20 --warmup 5 --device cuda --json $O/torch_gpt2_b16.json >$O/torch_gpt2_b16.txt 2>&1
echo "compile gpt B16:"; grep -E "ceiling|pytorch|rror" $O/torch_gpt2_b16.txt | tail -3
el "end"
tar czf $OUT/b.tgz --exclude=tokens --exclude=tokens32k -C $OUT b
