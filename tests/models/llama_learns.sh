#!/usr/bin/env bash
# The llama model learns the fortunes under `mpirun -np 2` on the CPU: the mean logged loss of the last 10
# steps is under 0.6 of the first 3 (about ln 256 = 5.5 at start), the validation loss under 3.3 nats per
# byte, and the run was a 2-rank one. Usage: llama_learns.sh MPIEXEC MINIDP_TRAIN [extra flags]
set -euo pipefail
mpiexec=$1 program=$2
shift 2
log=$("$mpiexec" -np 2 --oversubscribe "$program" --model llama --device cpu --data fortunes --layers 2 --heads 4 \
      --kv-heads 2 --embd 64 --hidden 176 --context 64 --batch-size 8 --steps 150 --lr 3e-3 --log-every 1 \
      --eval-batches 4 --sample 40 "$@")
echo "$log" | grep -v '^step' || true
losses=$(echo "$log" | awk '/^step/ {print $4}')
first=$(echo "$losses" | head -3 | awk '{ s += $1 } END { print s / NR }')
last=$(echo "$losses" | tail -10 | awk '{ s += $1 } END { print s / NR }')
val=$(echo "$log" | grep -o '"val_loss":[0-9.e-]*' | cut -d: -f2)  # from the JSON summary
echo "mean loss: first 3 steps $first, last 10 steps $last; validation loss $val"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.6 * a) }' || { echo "FAIL: the loss did not fall"; exit 1; }
awk -v v="$val" 'BEGIN { exit !(v < 3.3) }' || { echo "FAIL: validation loss $val"; exit 1; }
echo "$log" | grep -q '"world":2' || { echo "FAIL: not a 2-rank run"; exit 1; }
echo "PASS"
