#!/usr/bin/env bash
# build: working tree defaults (forward Bf16Tiles<2,4> at d <= 64, dq-from-dS <2,2>); build-va: forward <1,4>;
# build-vb: forward <1,4>, dq <1,4>; .gpu-src/base: main HEAD.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c2; mkdir -p $O
deps=$PWD/.deps/root
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
cfg() { cmake -S $1 -B $2 -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$deps/usr" "${@:3}"; }
( cd .gpu-src/base && cfg . build >$O/base_cmake.log 2>&1 && cmake --build build -j3 --target minidp-bench minidp-bench-attention >$O/base_build.log 2>&1; echo "base build rc $?" ) &
( cfg . build-va "-DCMAKE_CUDA_FLAGS=-DMINIDP_FA_FWD_MAXD=0" >$O/va_cmake.log 2>&1 && cmake --build build-va -j4 --target minidp-bench minidp-bench-attention test_flash_attention >$O/va_build.log 2>&1; echo "va build rc $?" ) &
( cfg . build-vb "-DCMAKE_CUDA_FLAGS=-DMINIDP_FA_FWD_MAXD=0 -DMINIDP_FA_DQ_MAXD=0" >$O/vb_cmake.log 2>&1 && cmake --build build-vb -j3 --target minidp-bench-attention test_flash_attention >$O/vb_build.log 2>&1; echo "vb build rc $?" ) &
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:"
wait
el "built"
for b in build build-va build-vb; do
  echo "$b test_flash_attention: $(timeout 300 $b/tests/test_flash_attention --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|first at|tests ran' | head -14 | tr '\n' ' ')"
done
el "flash tests"
for spec in "test_reference *" "test_bf16_step *" "test_cuda_graph *" "test_composite_ops *Cuda*" "test_sequence_ops *Cuda*"; do
  set -f; set -- $spec; set +f
  echo "$1: $(build/tests/$1 --gtest_filter="$2" --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|tests ran' | head -8 | tr '\n' ' ')"
done
el "other tests"
for v in base v1 va vb; do
  case $v in base) bin=.gpu-src/base/build/bin;; v1) bin=build/bin;; *) bin=build-$v/bin;; esac
  echo "== $v"; $bin/minidp-bench-attention 2>&1 | grep -E "impl|bf16" | tee $O/attn_$v.txt
  $bin/minidp-bench-attention --head-dim 128 2>&1 | grep -E "bf16" | tee $O/attn128_$v.txt
done
el "attention benches"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
for r in 1 2; do
  for v in base v1 va; do
    case $v in base) bin=.gpu-src/base/build/bin;; v1) bin=build/bin;; *) bin=build-$v/bin;; esac
    $bin/minidp-bench "${gpt2[@]}" --batch-size 16 --json $O/${v}_b16_$r.json >$O/${v}_b16_$r.txt 2>&1
    echo "$v gpt b16 r$r"; tail -3 $O/${v}_b16_$r.txt | head -2
  done
done
el "step benches"
secs=(--section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section InstructionStats)
for v in v1 va; do
  bin=build/bin/minidp-bench-attention; [ $v = va ] && bin=build-va/bin/minidp-bench-attention
  timeout 60 ncu --kernel-name-base demangled -k 'regex:flashForwardKernel<.*Bf16' --launch-skip 5 --launch-count 1 "${secs[@]}" \
    $bin --head-dim 64 --batch 16 >$O/ncu_fwd_$v.txt 2>&1; echo "ncu fwd $v rc $?"
  timeout 60 ncu --kernel-name-base function -k 'regex:flashBackwardKeyKernel' --launch-skip 50 --launch-count 1 "${secs[@]}" \
    $bin --head-dim 64 --batch 16 >$O/ncu_key_$v.txt 2>&1; echo "ncu key $v rc $?"
done
el "end"
cd $OUT && tar czf c2.tgz --exclude=tokens c2 && rm -rf c2
