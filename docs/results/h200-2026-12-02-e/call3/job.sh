#!/usr/bin/env bash
# build/: the working tree (main 5e05956: flash attention copies as pointer steps, recomputing query pass at d 64);
# .gpu-src/base: main d916a04 (minidp-bench only), the same-job baseline.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c3; mkdir -p $O
trap 'exit 124' TERM
trap 'cd $OUT && tar czf c3.tgz --exclude=tokens --exclude=tokens32k c3 && rm -rf c3' EXIT
deps=$PWD/.deps/root
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
( cd .gpu-src/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >$O/base_cmake.log 2>&1 && cmake --build build -j5 --target minidp-bench >$O/base_build.log 2>&1; echo "base build rc $?" ) &
mb=$!
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:"
el "built"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null; $py scripts/make-random-tokens.py $O/tokens32k 32000 >/dev/null
echo "test_flash_attention: $(build/tests/test_flash_attention --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|tests ran' | head -12 | tr '\n' ' ')"
(cd build && ctest -j12 --timeout 300 -E 'bf16_wire_curve|train_bad_input|train_stall|train_resume|curve|signal_stop|data_at_risk' >$O/ctest.log 2>&1)
grep -E "tests passed|\(Failed\)|\(Timeout\)|Total Test" $O/ctest.log | tail -12
el "tests"
wait $mb
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
shape=(--layers 12 --embd 1024 --heads 8 --kv-heads 4 --hidden 2816 --context 1024)
llama=(--model llama "${shape[@]}" --data llmc --llmc-train $O/tokens32k/train.bin --llmc-val $O/tokens32k/val.bin
       --device cuda --optimizer adamw --batch-size 8 --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
for v in new base new; do
  bin=build/bin/minidp-bench; [ $v = base ] && bin=.gpu-src/base/build/bin/minidp-bench
  n=$(ls $O/${v}_b16_*.json 2>/dev/null | wc -l); n=$((n + 1))
  $bin "${gpt2[@]}" --batch-size 16 --json $O/${v}_b16_$n.json >$O/${v}_b16_$n.txt 2>&1
  echo "$v gpt b16 r$n"; tail -3 $O/${v}_b16_$n.txt | head -2
done
build/bin/minidp-bench "${gpt2[@]}" --batch-size 8 --json $O/new_b8.json >$O/new_b8.txt 2>&1; echo "new gpt b8"; tail -3 $O/new_b8.txt | head -2
build/bin/minidp-bench "${llama[@]}" --json $O/new_llama.json >$O/new_llama.txt 2>&1; echo "new llama b8"; tail -3 $O/new_llama.txt | head -2
build/bin/minidp-bench-attention 2>&1 | grep -E "impl|bf16" | tee $O/attn.txt
el "minidp benches"
for B in 16 8; do
  $py train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --dtype bf16 \
    --compile on --attention sdpa --batch-size $B --steps 20 --warmup 5 --device cuda --json $O/torch_gpt2_b$B.json >$O/torch_gpt2_b$B.txt 2>&1
  echo "compile gpt B$B:"; grep -E "ceiling|pytorch|rror" $O/torch_gpt2_b$B.txt | tail -3
  el "compile B$B"
done
$py train/torch_bench.py --model llama "${shape[@]}" --vocab 32000 --dtype bf16 --compile on --attention sdpa --batch-size 8 \
  --steps 20 --warmup 5 --device cuda --json $O/torch_llama.json >$O/torch_llama.txt 2>&1
echo "compile llama:"; grep -E "ceiling|pytorch|rror" $O/torch_llama.txt | tail -3
el "end"
