#!/usr/bin/env bash
# ZeRO on the emulated link (one process modelling 8 ranks; one GPU): the step of DDP and of ZeRO-3 with prefetch
# (units gathered in fp32, and in bf16) at 25 GB/s (10 us) for GPT-2 small and the README's llama shape, overlap off and on in each bench table; rank 0's
# peak memory of DDP and ZeRO-3 for a llama of 443 M parameters; and a llama of 5.9 B parameters, which the memory
# estimate refuses under DDP, trained for a few steps under ZeRO-3. The emulated gathers repeat rank 0's shard:
# only the times and the memory mean something.
# Usage: scripts/zero-emulated-job.sh OUTDIR [BIN]   (BIN: the folder of minidp-bench, default build/bin)
# TOKENS: a folder with gpt2/{train,val}.bin and llama/{train,val}.bin (made by make-random-tokens.py if absent).
# ZE_PARTS: which parts run ("step memory big", the default; "variants": ZeRO-3 kept gathered or two units ahead,
# ZeRO-2). ZE_STEPS ("--steps 8 --warmup 3"), ZE_TIMEOUT (120 s a bench), ZE_BIG_TIMEOUT (150 s). ZE_DEVICE=cpu ZE_TINY=1 runs the same commands on tiny shapes on the CPU (a check of the flags).
set -uo pipefail
out=${1:?usage: zero-emulated-job.sh OUTDIR [BIN]}
bin=${2:-build/bin}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
tokens=${TOKENS:-$out/tokens}
for v in gpt2:50257 llama:32000; do
  [ -f "$tokens/${v%%:*}/train.bin" ] || python3 scripts/make-random-tokens.py "$tokens/${v%%:*}" "${v##*:}"
done
device=${ZE_DEVICE:-cuda}
emu=(--comm emulated --emulated-world 8 --emulated-gbps 25 --emulated-latency-us 10)
common=(--device "$device" --optimizer adamw --data llmc)
[ "$device" = cuda ] && common+=(--dtype bf16)
if [ "${ZE_TINY:-0}" = 1 ]; then
  gpt2=(--model gpt --layers 2 --heads 2 --embd 32 --context 32)
  llama=(--model llama --layers 2 --heads 4 --kv-heads 2 --embd 32 --hidden 64 --context 32)
  mid=("${llama[@]}") big=("${llama[@]}") steps=(--steps 2 --warmup 1)
else
  gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024)
  llama=(--model llama --layers 12 --heads 8 --kv-heads 4 --embd 1024 --hidden 2816 --context 1024)
  mid=(--model llama --layers 32 --heads 8 --kv-heads 4 --embd 1024 --hidden 2816 --context 256)
  big=(--model llama --layers 32 --heads 32 --kv-heads 8 --embd 4096 --hidden 11008 --context 1024)
  steps=(${ZE_STEPS:---steps 8 --warmup 3})
fi
data() { echo --llmc-train "$tokens/$1/train.bin" --llmc-val "$tokens/$1/val.bin"; }
bench() {  # NAME ARGS...: one bench, its table's last lines printed
  local name=$1
  shift
  timeout "${ZE_TIMEOUT:-120}" "$bin/minidp-bench" "${common[@]}" "$@" --json "$out/$name.json" >"$out/$name.txt" 2>&1
  echo "== $name (rc $?)"
  grep -E "^EMULATED|step_ms|^ +(high|default) |error|refuse|needs up to" "$out/$name.txt" | tail -5
}
parts=" ${ZE_PARTS:-step memory big} "
wants() { [[ $parts == *" $1 "* ]]; }  # PART: whether ZE_PARTS names it
# 1. Step time at 25 GB/s, world 8: DDP (25 MB buckets) and ZeRO-3 (prefetch 1; the units gathered in the
# parameters' fp32, and in bf16 as FSDP2's param_dtype), batch 8.
if wants step; then
  for m in gpt2 llama; do
    declare -n shape=$m
    bench "${m}_ddp" "${shape[@]}" $(data $m) --batch-size 8 "${steps[@]}" "${emu[@]}" --bucket-mb-list 25
    bench "${m}_zero3" "${shape[@]}" $(data $m) --batch-size 8 "${steps[@]}" "${emu[@]}" --zero 3 --zero-prefetch 1
    bench "${m}_zero3_bf16" "${shape[@]}" $(data $m) --batch-size 8 "${steps[@]}" "${emu[@]}" --zero 3 \
      --zero-prefetch 1 --zero-param-dtype bf16
  done
fi
# 1b. The other ZeRO settings at the same shapes: ZeRO-3 keeping the gathered units from forward to backward
# (one gather a step), ZeRO-3 two units ahead, ZeRO-2 (traffic of DDP's: reduce-scatter + all-gather).
if wants variants; then
  for m in gpt2 llama; do
    declare -n shape=$m
    bench "${m}_zero3_keep" "${shape[@]}" $(data $m) --batch-size 8 "${steps[@]}" "${emu[@]}" --zero 3 \
      --zero-prefetch 1 --zero-keep-gathered
    bench "${m}_zero3_prefetch2" "${shape[@]}" $(data $m) --batch-size 8 "${steps[@]}" "${emu[@]}" --zero 3 \
      --zero-prefetch 2
    bench "${m}_zero2" "${shape[@]}" $(data $m) --batch-size 8 "${steps[@]}" "${emu[@]}" --zero 2 --zero-gather overlap
  done
fi
# 2. Peak memory of rank 0, 443 M parameters, batch 1 of 256 tokens: DDP and ZeRO-3.
if wants memory; then
  bench mid_ddp "${mid[@]}" $(data llama) --batch-size 1 "${steps[@]}" "${emu[@]}"
  bench mid_zero3 "${mid[@]}" $(data llama) --batch-size 1 "${steps[@]}" "${emu[@]}" --zero 3
  bench mid_zero3_bf16 "${mid[@]}" $(data llama) --batch-size 1 "${steps[@]}" "${emu[@]}" --zero 3 \
    --zero-param-dtype bf16
fi
# 3. 5.9 B parameters: the estimate refuses DDP; ZeRO-3 trains.
if wants big; then
  bench big_ddp "${big[@]}" $(data llama) --batch-size 1 --steps 2 --warmup 1 "${emu[@]}"
  ZE_TIMEOUT=${ZE_BIG_TIMEOUT:-150} bench big_zero3 "${big[@]}" $(data llama) --batch-size 1 --steps 2 --warmup 1 \
    "${emu[@]}" --zero 3
fi
