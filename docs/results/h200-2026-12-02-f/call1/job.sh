#!/usr/bin/env bash
# Call 1: build the working tree (main + cuBLASLt study env vars), flash tests, B16 profile, GEMM study, mask variants.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c1; mkdir -p $O
trap 'exit 124' TERM
trap 'cd $OUT && tar czf c1.tgz --exclude=tokens --exclude=tokens32k c1 && rm -rf c1' EXIT
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:" | tail -3
el "built"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null
echo "test_flash_attention: $(build/tests/test_flash_attention --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|tests ran' | head -12 | tr '\n' ' ')"
el "flash tests"
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --bucket-mb-list 25 --batch-size 16)
MINIDP_LT_STUDY=1 build/bin/minidp-bench "${gpt2[@]}" --steps 2 --warmup 1 >$O/study_out.txt 2>$O/study.txt
grep -c "^STUDY M" $O/study.txt; el "study"
for r in 1 2; do
  for m in none 1 none 1; do
    if [ $m = none ]; then build/bin/minidp-bench "${gpt2[@]}" --steps 20 --warmup 5 >$O/mask_${m}_$r.txt 2>&1
    else MINIDP_LT_REDUCTION_MASK=$m build/bin/minidp-bench "${gpt2[@]}" --steps 20 --warmup 5 >$O/mask_${m}_$r.txt 2>&1; fi
    echo "mask $m: $(tail -3 $O/mask_${m}_$r.txt | head -2 | awk "{print \$5, \$6}" | tr "\n" " ")"
  done
  break
done
el "masks"
ln -sf $O/tokens $O/p_tokens; mkdir -p $O/p; ln -sf $O/tokens $O/p/tokens
PROFILE_BATCH=16 timeout 300 scripts/gpu-job.sh $O/p profile 2>&1 | grep -v "^ln:" | head -45
el "profile"
