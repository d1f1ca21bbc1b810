#!/usr/bin/env bash
# Diagnosis of a bf16 / fp32 gap on the fortunes GPT: fp32 and bf16 side by side for 500 steps at its
# shape and at shapes that each change one dimension, all at once on one GPU. Prints the training
# loss at steps 250 and 500 of each pair. Usage: scripts/bf16-bisect.sh OUTDIR (after a build).
set -uo pipefail
out=${1:?usage: bf16-bisect.sh OUTDIR}
mkdir -p "$out"
base=(--model gpt --data fortunes --device ${DEVICE:-cuda} --steps ${STEPS:-500} --log-every $(( ${STEPS:-500} / 2 )) --eval-batches 2)
declare -A shapes=(
  [base]="--layers 6 --heads 6 --embd 384 --context 256 --batch-size 32"
  [layers2]="--layers 2 --heads 6 --embd 384 --context 256 --batch-size 32"
  [embd128]="--layers 6 --heads 2 --embd 128 --context 256 --batch-size 32"
  [context64]="--layers 6 --heads 6 --embd 384 --context 64 --batch-size 128"
  [batch8]="--layers 6 --heads 6 --embd 384 --context 256 --batch-size 8"
)
for name in "${!shapes[@]}"; do
  for dt in fp32 bf16; do
    timeout ${BISECT_TIMEOUT:-240} build/bin/minidp-train "${base[@]}" ${shapes[$name]} --dtype $dt >"$out/bisect_${name}_$dt.log" 2>&1 &
  done
done
wait
for name in base layers2 embd128 context64 batch8; do
  for dt in fp32 bf16; do
    printf '%-10s %-5s %s\n' "$name" "$dt" "$(grep -E '^step [0-9]+/' "$out/bisect_${name}_$dt.log" | awk '{print $2, $4}' | tr '\n' ' ')"
  done
done
