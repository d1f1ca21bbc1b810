#!/usr/bin/env bash
# ZeRO-1 end to end on the CPU: minidp-train under mpirun -np N with --zero 1 (parameters gathered at the end
# of the step, bucket by bucket with overlap off, or in the forward's order and waited on where the next
# forward reads them, or validation every 5 steps, the first reader after those steps) writes plain DDP's
# checkpoint, byte for byte, optimizer state included (gathered from the ranks' shards): the MPI
# reduce-scatter sums to rank 0 exactly as the all-reduce does, and AdamW is element-wise, so sharding moves
# the work, not the bits. With --clip-grad-norm the norm is summed in another order (shard by shard), so the
# checkpoints are near, not necessarily equal. Usage: MINIDP_PYTHON=... zero_identical.sh MPIEXEC MINIDP_TRAIN NP
# (ctest sets MINIDP_PYTHON, the build's interpreter; scripts/python.sh prints it)
set -euo pipefail
mpiexec=$1 train=$2 np=$3
python=${MINIDP_PYTHON:?MINIDP_PYTHON must name the Python interpreter with numpy (scripts/python.sh prints it)}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--model gpt --device cpu --steps 20 --log-every 10 --batch-size 8 --data fortunes --layers 2 --heads 2
      --embd 32 --context 32 --bucket-mb 0.02 --first-bucket-mb 0.005)
run() {  # NAME FLAG...
  local name=$1
  shift
  "$mpiexec" -np "$np" --oversubscribe "$train" "${args[@]}" "$@" --save "$dir/$name.safetensors" > "$dir/$name.log"
}
run ddp
run end --zero 1
run overlap --zero 1 --zero-gather overlap --overlap off
run forward --zero 1 --zero-gather forward --eval-every 5
run ddp_clip --clip-grad-norm 0.5
run zero_clip --zero 1 --clip-grad-norm 0.5
grep -q "ZeRO-1: optimizer state" "$dir/end.log" || { echo "no ZeRO-1 line:"; cat "$dir/end.log"; exit 1; }
cmp "$dir/ddp.safetensors" "$dir/end.safetensors"
cmp "$dir/ddp.safetensors" "$dir/overlap.safetensors"
cmp "$dir/ddp.safetensors" "$dir/forward.safetensors"
echo "identical: $(sha256sum < "$dir/ddp.safetensors")"
"$python" "$(dirname "$0")/checkpoints_near.py" "$dir/zero_clip.safetensors" "$dir/ddp_clip.safetensors" 1e-5
echo "clipped against unclipped (must differ):"
if "$python" "$(dirname "$0")/checkpoints_near.py" "$dir/ddp_clip.safetensors" "$dir/ddp.safetensors" 1e-2; then
  echo "--clip-grad-norm 0.5 changed nothing"
  exit 1
fi
