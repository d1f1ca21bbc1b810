#!/usr/bin/env bash
# One job: build, the tests, minidp's steps, then the same shapes under torch.compile; an ncu profile of
# GPT-2 B16 if time is left.
set -u
O=$1; mkdir -p $O
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
el() { echo $(( $(date +%s)-t0 )); }
scripts/gpu-job.sh $O build 2>&1 | grep -v "^ln:"; echo "built at $(el) s"
[ -x build/bin/minidp-bench ] || exit 1
(cd build && ctest -j12 --timeout 300 -E 'bf16_wire_curve|train_bad_input|train_stall|train_resume|curve|signal_stop|data_at_risk' > $O/ctest.log 2>&1); grep -E "tests passed|Failed|\*\*\*|Total Test" $O/ctest.log
set -f
for spec in "test_mixed_precision *BiasGradient*:Bf16Ops.*:DirectGrad*" "test_fused_ops *Residual*:*LayerNorm*:*RmsNorm*:*CrossEntropy*" "test_autograd *Held*" "test_classifier *" "test_bf16_step *" "test_reference *" "test_cuda_graph *"; do
  set -- $spec; echo "$1 $2: $(build/tests/$1 --gtest_filter="$2" --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|tests ran' | head -8 | tr '\n' ' ')"
done; set +f
echo "tests done at $(el) s"
python3 scripts/make-random-tokens.py $O/tokens >/dev/null; python3 scripts/make-random-tokens.py $O/tokens32k 32000 >/dev/null
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 15 --warmup 5 --bucket-mb-list 25)
shape=(--layers 12 --embd 1024 --heads 8 --kv-heads 4 --hidden 2816 --context 1024)
llama=(--model llama "${shape[@]}" --data llmc --llmc-train $O/tokens32k/train.bin --llmc-val $O/tokens32k/val.bin --device cuda --optimizer adamw --batch-size 8 --dtype bf16 --steps 15 --warmup 5 --bucket-mb-list 25)
for rep in 1 2; do
  for B in 16 8; do build/bin/minidp-bench "${gpt2[@]}" --batch-size $B --json $O/mdp_gpt2_b${B}_$rep.json > $O/mdp_gpt2_b${B}_$rep.txt 2>&1; echo "mdp gpt B$B rep$rep: $(tail -2 $O/mdp_gpt2_b${B}_$rep.txt | head -1)"; done
  build/bin/minidp-bench "${llama[@]}" --json $O/mdp_llama_$rep.json > $O/mdp_llama_$rep.txt 2>&1; echo "mdp llama rep$rep: $(tail -2 $O/mdp_llama_$rep.txt | head -1)"
done
echo "block: $(build/bin/minidp-bench-block 2>&1 | tail -1)"
echo "minidp done at $(el) s"
for B in 16 8; do
  python3 train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --dtype bf16 --compile on --attention sdpa --batch-size $B --steps 15 --warmup 5 --device cuda --json $O/torch_gpt2_b$B.json > $O/torch_gpt2_b$B.txt 2>&1; echo "compile gpt B$B:"; grep -E "ceiling|pytorch|rror" $O/torch_gpt2_b$B.txt | tail -4
done
python3 train/torch_bench.py --model llama "${shape[@]}" --vocab 32000 --dtype bf16 --compile on --attention sdpa --batch-size 8 --steps 15 --warmup 5 --device cuda --json $O/torch_llama.json > $O/torch_llama.txt 2>&1; echo "compile llama:"; grep -E "ceiling|pytorch|rror" $O/torch_llama.txt | tail -4
echo "compile done at $(el) s"
if [ $(el) -lt 470 ]; then PROFILE_BATCH=16 scripts/gpu-job.sh $O profile 2>&1 | grep -v "^ln:" | head -32; fi
echo "total $(el) s"
