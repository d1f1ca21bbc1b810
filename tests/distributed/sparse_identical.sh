#!/usr/bin/env bash
# --sparse-embedding-grad end to end: minidp-train's GPT under mpirun -np N with the row-sparse all-reduce
# of wte.weight, overlap on and off, and dense DDP write byte-identical checkpoints on the CPU (the MPI
# average is element-wise in rank order, whatever the buffer). N x 2 micro-batches x 2 x 16 ids < 256 rows:
# the sparse path, not the fallback. Usage: sparse_identical.sh MPIEXEC MINIDP_TRAIN N [FLAG...]
set -euo pipefail
mpiexec=$1 train=$2 ranks=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--model gpt --device cpu --data fortunes --steps 10 --log-every 10 --batch-size 2 --context 16 --grad-accum 2
      --layers 2 --heads 2 --embd 32 --bucket-mb 0.02 --first-bucket-mb 0.005 --optimizer adamw "$@")
run() {
  "$mpiexec" -np "$ranks" --oversubscribe "$train" "${args[@]}" --save "$dir/$1.safetensors" "${@:2}" > "$dir/$1.log"
}
run on --sparse-embedding-grad --overlap on
run off --sparse-embedding-grad --overlap off
run dense
grep -q "wte.weight all-reduced by rows" "$dir/on.log" || { echo "the sparse path was not set up:"; cat "$dir/on.log"; exit 1; }
cmp "$dir/on.safetensors" "$dir/off.safetensors"
cmp "$dir/on.safetensors" "$dir/dense.safetensors"
echo "identical: $(sha256sum < "$dir/on.safetensors")"
