#!/usr/bin/env bash
# Call 6: the three shapes at c77fcb7, minidp beside torch.compile in this one job.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c6; mkdir -p $O
trap 'exit 124' TERM
trap 'cd $OUT && tar czf c6.tgz --exclude=tokens --exclude=tokens32k c6 && rm -rf c6' EXIT
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
[ -x build/bin/minidp-bench ] || scripts/gpu-job.sh $O/v build 2>&1 | grep -v "^ln:" | tail -5
el "built"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null; $py scripts/make-random-tokens.py $O/tokens32k 32000 >/dev/null
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
shape=(--layers 12 --embd 1024 --heads 8 --kv-heads 4 --hidden 2816 --context 1024)
llama=(--model llama "${shape[@]}" --data llmc --llmc-train $O/tokens32k/train.bin --llmc-val $O/tokens32k/val.bin
       --device cuda --optimizer adamw --batch-size 8 --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25)
row() { grep -E '^ +high' $1 | awk '{print $5, $6, "peak", $(NF-1)}' | tr '\n' ' '; }
for r in 1 2; do
  build/bin/minidp-bench "${gpt2[@]}" --batch-size 16 --json $O/b16_$r.json >$O/b16_$r.txt 2>&1; echo "gpt b16 r$r: $(row $O/b16_$r.txt)"
  build/bin/minidp-bench "${gpt2[@]}" --batch-size 8 --json $O/b8_$r.json >$O/b8_$r.txt 2>&1; echo "gpt b8 r$r: $(row $O/b8_$r.txt)"
  build/bin/minidp-bench "${llama[@]}" --json $O/llama_$r.json >$O/llama_$r.txt 2>&1; echo "llama b8 r$r: $(row $O/llama_$r.txt)"
done
build/bin/minidp-bench "${gpt2[@]}" --batch-size 16 --cast-weights --json $O/b16_cast.json >$O/b16_cast.txt 2>&1; echo "gpt b16 --cast-weights: $(row $O/b16_cast.txt)"
el "minidp benches"
for B in 16 8; do
  $py train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --dtype bf16 \
    --compile on --attention sdpa --batch-size $B --steps 20 --warmup 5 --device cuda --json $O/torch_gpt2_b$B.json >$O/torch_gpt2_b$B.txt 2>&1
  echo "compile gpt B$B:"; grep -E "ceiling|pytorch|rror" $O/torch_gpt2_b$B.txt | tail -3
  el "compile B$B"
done
$py train/torch_bench.py --model llama "${shape[@]}" --vocab 32000 --dtype bf16 --compile on --attention sdpa \
  --batch-size 8 --steps 20 --warmup 5 --device cuda --json $O/torch_llama.json >$O/torch_llama.txt 2>&1
echo "compile llama B8:"; grep -E "ceiling|pytorch|rror" $O/torch_llama.txt | tail -3
el "end"
