#!/usr/bin/env bash
# The data-parallel engine's promise end to end: minidp-train under mpirun -np 2 with overlap on and with
# overlap off writes byte-identical checkpoints. Usage: overlap_identical.sh MPIEXEC MINIDP_TRAIN MODEL [FLAG...]
# (extra flags go to both runs, e.g. --comm-hook bf16 or --zero 1)
set -euo pipefail
mpiexec=$1 train=$2 model=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--model "$model" --device cpu --steps 20 --log-every 10 --batch-size 8)
[ "$model" = gpt ] && args+=(--data fortunes --layers 2 --heads 2 --embd 32 --context 32 --bucket-mb 0.02 --first-bucket-mb 0.005)
[ "$model" = mlp ] && args+=(--hidden 64 64 --bucket-mb 0.05 --first-bucket-mb 0.01)
args+=("$@")
for overlap in on off; do
  "$mpiexec" -np 2 --oversubscribe "$train" "${args[@]}" --overlap "$overlap" --save "$dir/$overlap.safetensors" \
    > "$dir/$overlap.log"
done
cmp "$dir/on.safetensors" "$dir/off.safetensors"
grep -q "bucket 2" "$dir/on.log" || { echo "expected several buckets:"; cat "$dir/on.log"; exit 1; }
echo "identical: $(sha256sum < "$dir/on.safetensors")"
