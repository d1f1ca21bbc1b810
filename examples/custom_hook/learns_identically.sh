#!/usr/bin/env bash
# Trains the MLP under `mpirun -np 2` with --comm-hook topk, overlap on and off: the two checkpoints are
# byte-identical (every rank applies the same bits, whenever the buckets are launched), and the run learned
# (test accuracy over 0.6; chance 0.1). Then 10 steps, --save, and --resume to 20 end with the bytes of 20
# steps straight: the hook's error feedback continues from the checkpoint (a resume that restarted it from
# zero would send other entries from step 11 on). And --rebuild-buckets, whose re-plan gives the MLP the
# same buckets, ends with the bytes of the run without it: the error feedback moves to the new plan by
# parameter name; --bucket-mb auto runs with the hook's wire cost. Last, the hook's own flag --top-k-fraction.
# Usage: learns_identically.sh MPIEXEC CUSTOM_HOOK_TRAIN
set -euo pipefail
mpiexec=$1 program=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for overlap in on off; do
  "$mpiexec" -np 2 --oversubscribe "$program" --model mlp --comm-hook topk --steps 300 --log-every 100 --hidden 64 \
    --batch-size 32 --overlap "$overlap" --save "$dir/$overlap.safetensors" > "$dir/$overlap.log"
done
cat "$dir/on.log"
cmp "$dir/on.safetensors" "$dir/off.safetensors" || { echo "FAIL: overlap on and off differ"; exit 1; }
grep -q '"world":2' "$dir/on.log" || { echo "FAIL: not a 2-rank run"; exit 1; }
accuracy=$(grep -o '"test_accuracy":[0-9.e-]*' "$dir/on.log" | cut -d: -f2)
awk -v acc="$accuracy" 'BEGIN { exit !(acc > 0.6) }' || { echo "FAIL: test accuracy $accuracy"; exit 1; }
resumable() {
  "$mpiexec" -np 2 --oversubscribe "$program" --model mlp --comm-hook topk --hidden 64 --batch-size 32 \
    --log-every 10 "$@" > /dev/null
}
resumable --steps 20 --save "$dir/full.safetensors"
resumable --steps 10 --save "$dir/half.safetensors"
resumable --steps 20 --resume "$dir/half.safetensors" --save "$dir/resumed.safetensors"
grep -aq '"comm_hook.topk.error.' "$dir/half.safetensors" || { echo "FAIL: no topk error in the checkpoint"; exit 1; }
cmp "$dir/full.safetensors" "$dir/resumed.safetensors" || { echo "FAIL: 10 + resume + 10 != 20 steps"; exit 1; }
resumable --steps 20 --rebuild-buckets --save "$dir/rebuilt.safetensors"
cmp "$dir/full.safetensors" "$dir/rebuilt.safetensors" || { echo "FAIL: --rebuild-buckets changed the run"; exit 1; }
# --bucket-mb auto costs each modelled bucket by the hook's wireCost and re-plans after the first step.
"$mpiexec" -np 2 --oversubscribe "$program" --model mlp --comm-hook topk --hidden 64 --batch-size 32 --steps 3 \
  --bucket-mb auto > "$dir/auto.log"
grep -q "bucket cap auto: .*chose" "$dir/auto.log" || { echo "FAIL: no bucket cap chosen"; exit 1; }
# --top-k-fraction, the hook's own flag: in --help, range-checked as it is parsed (exit 2, one line), and a
# --resume with another fraction refused (exit 1, one line naming the hook's settings).
"$program" --help | grep -q -- "--top-k-fraction" || { echo "FAIL: --top-k-fraction not in --help"; exit 1; }
usage() {  # expected line, then the flags
  local expected=$1 status=0
  shift
  out=$("$program" "$@" 2>&1) || status=$?
  [ "$status" = 2 ] && [ "$out" = "$expected" ] || { echo "FAIL: $* gave status $status: $out"; exit 1; }
}
for bad in 0 1.5 x; do
  usage "$(basename "$program"): error: --top-k-fraction: must be a number in (0, 1], got $bad (see --help)" \
    --model mlp --comm-hook topk --top-k-fraction "$bad"
done
usage "$(basename "$program"): usage error: --top-k-fraction is a setting of --comm-hook topk; this run's hook is allreduce" \
  --model mlp --top-k-fraction 0.1
status=0
# One rank with the global batch of the two continues the same batches: only the fraction differs.
out=$("$program" --model mlp --comm-hook topk --hidden 64 --batch-size 64 --steps 20 --top-k-fraction 0.1 \
  --resume "$dir/half.safetensors" 2>&1) || status=$?
[ "$status" = 1 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "comm_hook.*--top-k-fraction" ||
  { echo "FAIL: a resume with another --top-k-fraction gave status $status: $out"; exit 1; }
resumable --steps 12 --top-k-fraction 0.05 --resume "$dir/half.safetensors" --save "$dir/same.safetensors"
echo "PASS: --top-k-fraction in --help, checked and kept on resume; overlap on == off to the byte, test accuracy $accuracy, 10 + resume + 10 == 20 steps and a re-plan"
echo "      keeping the error feedback, to the byte"
