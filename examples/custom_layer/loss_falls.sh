#!/usr/bin/env bash
# Trains rms-mlp under `mpirun -np 2` and checks that it learned: the mean logged loss of the last 10 steps
# is under half that of the first 3 (about ln 10 = 2.3 at start), and the test accuracy is over 0.5
# (chance: 0.1). Usage: loss_falls.sh MPIEXEC CUSTOM_TRAIN [extra flags]
set -euo pipefail
mpiexec=$1 program=$2
shift 2
log=$("$mpiexec" -np 2 --oversubscribe "$program" --model rms-mlp --steps 150 --log-every 1 --hidden 64 \
      --batch-size 32 "$@")
echo "$log" | grep -v '^step' || true
losses=$(echo "$log" | awk '/^step/ {print $4}')
first=$(echo "$losses" | head -3 | awk '{ s += $1 } END { print s / NR }')
last=$(echo "$losses" | tail -10 | awk '{ s += $1 } END { print s / NR }')
accuracy=$(echo "$log" | grep -o '"test_accuracy":[0-9.e-]*' | cut -d: -f2)  # from the JSON summary
echo "mean loss: first 3 steps $first, last 10 steps $last; test accuracy $accuracy"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' || { echo "FAIL: the loss did not fall"; exit 1; }
awk -v acc="$accuracy" 'BEGIN { exit !(acc > 0.5) }' || { echo "FAIL: test accuracy $accuracy"; exit 1; }
echo "$log" | grep -q '"world":2' || { echo "FAIL: not a 2-rank run"; exit 1; }
echo "PASS"
