#!/usr/bin/env bash
# verify (main c9f6cb2 + bgrad-gating + zeroed-grads + bd5b2ba) in build/; main c9f6cb2's bench in .gpu-src/main
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/j2; mkdir -p $O
deps=$PWD/.deps/root
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
( cd .gpu-src/main && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >$O/main_cmake.log 2>&1 && cmake --build build -j6 --target minidp-bench >$O/main_build.log 2>&1; echo "main build rc $?" ) &
mb=$!
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:"
el "verify built"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null
build/tests/test_mixed_precision >$O/test_mixed_precision.log 2>&1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|tests ran| ms\)$" $O/test_mixed_precision.log | grep -vE "^\[       OK" | head -30
grep -B3 -A8 "Failure" $O/test_mixed_precision.log | head -60
el "test_mixed_precision done"
wait $mb
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
for r in 1 2; do
  for v in main verify; do
    bin=build/bin/minidp-bench; [ $v = main ] && bin=.gpu-src/main/build/bin/minidp-bench
    $bin "${gpt2[@]}" --batch-size 16 --json $O/${v}_b16_$r.json >$O/${v}_b16_$r.txt 2>&1
    echo "$v b16 r$r"; tail -3 $O/${v}_b16_$r.txt | head -2
  done
  el "bench round $r"
done
$py train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --dtype bf16 \
  --compile on --attention sdpa --batch-size 16 --steps 20 --warmup 5 --device cuda --json $O/torch_gpt2_b16.json >$O/torch_gpt2_b16.txt 2>&1
echo "compile gpt B16:"; grep -E "ceiling|pytorch|rror" $O/torch_gpt2_b16.txt | tail -4
el "compile done"
left=$(( 560 - $(date +%s) + t0 ))
if [ $left -gt 60 ]; then
  WHOLE_SANITIZE_TOOLS=initcheck SANITIZE_TIMEOUT=$left scripts/gpu-job.sh $O/s whole-sanitize 2>&1 | grep -v "^ln:"
  for f in $O/s/whole_initcheck_*bf16*.log; do echo "== $f"; grep -m3 -E "Uninitialized|Invalid|rror" $f; tail -2 $f; done
fi
el "end"
tar czf $OUT/j2.tgz --exclude=tokens -C $OUT j2
