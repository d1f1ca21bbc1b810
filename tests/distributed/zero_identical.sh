#!/usr/bin/env bash
# ZeRO-1 end to end on the CPU: minidp-train under mpirun -np N with --zero 1 (parameters gathered at the end
# of the step, or bucket by bucket with overlap off) writes the same parameters, byte for byte, as plain DDP
# (the checkpoints differ in the optimizer state, which plain DDP writes and ZeRO-1 keeps sharded):
# the MPI reduce-scatter sums to rank 0 exactly as the all-reduce does, and AdamW is element-wise, so
# sharding moves the work, not the bits. Usage: zero_identical.sh MPIEXEC MINIDP_TRAIN NP
set -euo pipefail
mpiexec=$1 train=$2 np=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--model gpt --device cpu --steps 20 --log-every 10 --batch-size 8 --data fortunes --layers 2 --heads 2
      --embd 32 --context 32 --bucket-mb 0.02 --first-bucket-mb 0.005)
"$mpiexec" -np "$np" --oversubscribe "$train" "${args[@]}" --save "$dir/ddp.safetensors" > "$dir/ddp.log"
"$mpiexec" -np "$np" --oversubscribe "$train" "${args[@]}" --zero 1 --save "$dir/end.safetensors" > "$dir/end.log"
"$mpiexec" -np "$np" --oversubscribe "$train" "${args[@]}" --zero 1 --zero-gather overlap --overlap off \
  --save "$dir/overlap.safetensors" > "$dir/overlap.log"
grep -q "ZeRO-1: optimizer state" "$dir/end.log" || { echo "no ZeRO-1 line:"; cat "$dir/end.log"; exit 1; }
same="$(dirname "$0")/same_parameters.py"
python3 "$same" "$dir/ddp.safetensors" "$dir/end.safetensors"
python3 "$same" "$dir/ddp.safetensors" "$dir/overlap.safetensors"
echo "identical: $(sha256sum < "$dir/ddp.safetensors")"
