#!/usr/bin/env bash
# integrate (new, build/) beside main (old, .gpu-src/build): build both, tests of new, benches of both.
set -u
O=$1; mkdir -p $O/new $O/old
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
scripts/gpu-job.sh $O/new build > $O/new_build.txt 2>&1 &
(cd .gpu-src && scripts/gpu-job.sh $O/old build) > $O/old_build.txt 2>&1 &
wait; cat $O/new_build.txt $O/old_build.txt; echo "built in $(( $(date +%s)-t0 )) s"
[ -x build/bin/minidp-bench ] || exit 1
(cd build && ctest -j12 --timeout 300 -E 'bf16_wire_curve|train_bad_input|train_stall|train_resume|curve|signal_stop|data_at_risk' > $O/ctest.log 2>&1); grep -E "tests passed|Failed|\*\*\*|Total Test" $O/ctest.log
set -f
for spec in "test_flash_attention *StoredScore*:*Grouped*" "test_linalg *Residual*" "test_mixed_precision *Addend*:*Residual*" "test_composite_ops *" "test_powersgd *" "test_fused_ops *" "test_classifier *" ; do
  set -- $spec; echo "$1 $2: $(build/tests/$1 --gtest_filter="$2" --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests ran' | tr '\n' ' ')"
done; set +f
echo "== bench attention new"; build/bin/minidp-bench-attention --head-dim 64,128 --batch 16 2>&1 | grep -E 'flash|impl'
echo "== bench attention old"; .gpu-src/build/bin/minidp-bench-attention --head-dim 64,128 --batch 16 2>&1 | grep -E 'flash'
python3 scripts/make-random-tokens.py $O/tokens >/dev/null; python3 scripts/make-random-tokens.py $O/tokens32k 32000 >/dev/null
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 15 --warmup 5 --bucket-mb-list 25)
llama=(--model llama --layers 12 --embd 1024 --heads 8 --kv-heads 4 --hidden 2816 --context 1024 --data llmc --llmc-train $O/tokens32k/train.bin --llmc-val $O/tokens32k/val.bin --device cuda --optimizer adamw --batch-size 8 --dtype bf16 --steps 15 --warmup 5 --bucket-mb-list 25)
for rep in 1 2; do for v in old new; do
  b=build; [ $v = old ] && b=.gpu-src/build
  for B in 8 16; do $b/bin/minidp-bench "${gpt2[@]}" --batch-size $B --json $O/$v/gpt_b${B}_$rep.json > $O/$v/gpt_b${B}_$rep.txt 2>&1; echo "$v gpt B$B rep$rep: $(tail -2 $O/$v/gpt_b${B}_$rep.txt | tr '\n' '|')"; done
  $b/bin/minidp-bench "${llama[@]}" --json $O/$v/llama_$rep.json > $O/$v/llama_$rep.txt 2>&1; echo "$v llama rep$rep: $(tail -2 $O/$v/llama_$rep.txt | tr '\n' '|')"
  echo "$v block: $($b/bin/minidp-bench-block 2>&1 | tail -1)"
done; done
echo "total $(( $(date +%s)-t0 )) s"
