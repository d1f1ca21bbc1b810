#!/usr/bin/env bash
# Call 5: c77fcb7 (the working tree: cross-entropy's exp as FFMA + ex2.approx) against 2eb1ee0 (.gpu-src/base):
# the GPU tests that cover cross-entropy, the kernel bench, GPT-2 B16 alternated, torch.compile's ceiling.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c5; mkdir -p $O
trap 'exit 124' TERM
trap 'cd $OUT && tar czf c5.tgz --exclude=tokens c5 && rm -rf c5' EXIT
deps=$PWD/.deps/root
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
( cd .gpu-src/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >$O/base_cmake.log 2>&1 && cmake --build build -j5 --target minidp-bench minidp-bench-kernels >$O/base_build.log 2>&1; echo "base build rc $?" ) &
mb=$!
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:" | tail -5
wait $mb
el "built"
for t in test_linalg test_classifier test_gpt_loss test_reference test_bf16_step test_cuda_graph; do
  timeout 200 build/tests/$t --gtest_brief=1 >$O/$t.log 2>&1
  echo "$t rc $?: $(grep -E '^\[  (PASSED|FAILED) |Failure|Expected|Which is|exception|tests ran' $O/$t.log | head -12 | tr '\n' ' ')"
done
el "tests"
for v in head base; do
  bin=build/bin/minidp-bench-kernels; [ $v = base ] && bin=.gpu-src/base/build/bin/minidp-bench-kernels
  $bin >$O/kernels_$v.txt 2>&1; echo "$v: $(grep -i crossentropy $O/kernels_$v.txt | tr '\n' ' ')"
done
el "kernel bench"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25 --batch-size 16)
row() { grep -E '^ +high' $1 | awk '{print $5, $6, "peak", $(NF-1)}' | tr '\n' ' '; }
for r in 1 2 3; do
  for v in head base; do
    bin=build/bin/minidp-bench; [ $v = base ] && bin=.gpu-src/base/build/bin/minidp-bench
    $bin "${gpt2[@]}" --json $O/${v}_b16_$r.json >$O/${v}_b16_$r.txt 2>&1; echo "$v b16 r$r: $(row $O/${v}_b16_$r.txt)"
  done
done
el "minidp benches"
$py train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --dtype bf16 \
  --compile on --attention sdpa --batch-size 16 --steps 20 --warmup 5 --device cuda --json $O/torch_gpt2_b16.json >$O/torch_gpt2_b16.txt 2>&1
echo "compile gpt B16:"; grep -E "ceiling|pytorch|rror" $O/torch_gpt2_b16.txt | tail -3
el "end"
