#!/usr/bin/env bash
# ZeRO-2 and 3 end to end on the CPU (minidp-train under mpirun -np NP): after 20 steps of the MLP, GPT and
# llama, --zero 2 and --zero 3 write plain DDP's checkpoint byte for byte (the MPI reduce-scatter sums to
# rank 0 exactly as the all-reduce does, the gradients reach it unchanged through the scratch buffer, and
# the update is element-wise), with overlap on and off; 10 steps + --resume + 10 == 20 to the byte under each
# stage; and a state saved under one stage and world size continues under every other stage (0-3) and world
# size (1-3, the same global batch), ending near the uninterrupted run (another summation order only); with
# gradient accumulation and clipping near DDP; the bf16 wire keeps overlap on == off.
# Usage: MINIDP_PYTHON=... zero_stages.sh MPIEXEC MINIDP_TRAIN NP [STAGE...]   (stages default: 2 3)
set -euo pipefail
mpiexec=$1 train=$2 np=$3
shift 3
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(2 3)
python=${MINIDP_PYTHON:?MINIDP_PYTHON must name the Python interpreter with numpy (scripts/python.sh prints it)}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
opt=adamw rows=  # the optimizer, and --batch-size where not the model's default here
model_args() {  # MODEL: tiny sizes, small buckets (shards cut across parameters and buckets)
  case $1 in
    mlp) echo --model mlp --hidden 32 32 --batch-size "${rows:-4}" --bucket-mb 0.01 --first-bucket-mb 0.002 ;;
    gpt) echo --model gpt --data fortunes --layers 2 --heads 2 --embd 16 --context 16 --batch-size "${rows:-2}" \
              --eval-batches 1 --bucket-mb 0.005 --first-bucket-mb 0.002 ;;
    llama) echo --model llama --data fortunes --layers 2 --heads 2 --kv-heads 1 --embd 16 --hidden 32 --context 16 \
                --batch-size "${rows:-2}" --eval-batches 1 --bucket-mb 0.005 --first-bucket-mb 0.002 ;;
  esac
  echo --optimizer "$opt"
}
run() {  # RANKS NAME MODEL FLAG...
  local ranks=$1 name=$2 model=$3
  shift 3
  local launch=()
  [ "$ranks" -gt 1 ] && launch=("$mpiexec" -np "$ranks" --oversubscribe)
  local margs
  margs=$(model_args "$model")
  # --zero 3 has a bucket per unit: no bucket caps.
  case " $* " in *" --zero 3 "*) margs=$(echo "$margs" | sed -E 's/--(first-)?bucket-mb [0-9.]+//g') ;; esac
  # shellcheck disable=SC2086
  "${launch[@]}" "$train" $margs --log-every 10 "$@" --save "$dir/$name.safetensors" \
    > "$dir/$name.log" 2>&1 || { echo "run $name failed:"; cat "$dir/$name.log"; exit 1; }
}
same() {  # A B WHAT
  if cmp -s "$dir/$1.safetensors" "$dir/$2.safetensors"; then
    echo "ok   $3"
  else
    echo "FAIL $3 ($1 != $2)"
    fails=$((fails + 1))
  fi
}
near() {  # A B WHAT
  if "$python" "$(dirname "$0")/checkpoints_near.py" "$dir/$1.safetensors" "$dir/$2.safetensors" 1e-4 > "$dir/near.log"; then
    echo "ok   $3 ($(tail -n1 "$dir/near.log"))"
  else
    echo "FAIL $3: $(cat "$dir/near.log")"
    fails=$((fails + 1))
  fi
}
fails=0
for model in mlp gpt llama; do
  run "$np" "$model-ddp" "$model" --steps 20
  for z in "${stages[@]}"; do
    run "$np" "$model-z$z" "$model" --steps 20 --zero "$z"
    run "$np" "$model-z$z-off" "$model" --steps 20 --zero "$z" --overlap off
    grep -q "ZeRO-$z: " "$dir/$model-z$z.log" || { echo "FAIL no ZeRO-$z line"; cat "$dir/$model-z$z.log"; exit 1; }
    same "$model-ddp" "$model-z$z" "$model np$np: --zero $z == DDP after 20 steps"
    same "$model-z$z" "$model-z$z-off" "$model np$np: --zero $z overlap on == off"
  done
done
# Accumulation and clipping (the norm summed shard by shard: near DDP's), and the bf16 wire (overlap on == off).
run "$np" acc-ddp gpt --steps 20 --grad-accum 2 --clip-grad-norm 0.5
for z in "${stages[@]}"; do
  run "$np" "acc-z$z" gpt --steps 20 --grad-accum 2 --clip-grad-norm 0.5 --zero "$z"
  near "acc-z$z" acc-ddp "gpt np$np: --zero $z --grad-accum 2 --clip-grad-norm 0.5 near DDP's"
  run "$np" "bf16-z$z" gpt --steps 20 --comm-hook bf16 --zero "$z"
  run "$np" "bf16-z$z-off" gpt --steps 20 --comm-hook bf16 --zero "$z" --overlap off
  same "bf16-z$z" "bf16-z$z-off" "gpt np$np: --zero $z --comm-hook bf16 overlap on == off"
done
# 10 + resume + 10 == 20 under each stage (GPT).
for z in "${stages[@]}"; do
  run "$np" "half-z$z" gpt --steps 10 --zero "$z"
  run "$np" "resumed-z$z" gpt --steps 20 --zero "$z" --resume "$dir/half-z$z.safetensors"
  same "gpt-ddp" "resumed-z$z" "gpt np$np: --zero $z 10 + resume + 10 == 20"
done
# --zero 3 --zero-param-dtype bf16 (units gathered in bf16, FSDP2's param_dtype): overlap on == off; a state
# saved every 5 steps (each checkpoint gathers the units exactly, then frees them) and 10 + resume + 10 end
# with the bytes of 20 straight; and the rounding did change the run (not DDP's bytes).
if [[ " ${stages[*]} " == *" 3 "* ]]; then
  for model in gpt llama; do
    run "$np" "$model-bf16p" "$model" --steps 20 --zero 3 --zero-param-dtype bf16
    run "$np" "$model-bf16p-off" "$model" --steps 20 --zero 3 --zero-param-dtype bf16 --overlap off
    same "$model-bf16p" "$model-bf16p-off" "$model np$np: --zero 3 --zero-param-dtype bf16 overlap on == off"
    run "$np" "$model-bf16p-every" "$model" --steps 20 --zero 3 --zero-param-dtype bf16 --save-every 5
    same "$model-bf16p" "$model-bf16p-every" "$model np$np: --zero 3 --zero-param-dtype bf16 --save-every 5 == 20 straight"
    run "$np" "$model-bf16p-half" "$model" --steps 10 --zero 3 --zero-param-dtype bf16
    run "$np" "$model-bf16p-resumed" "$model" --steps 20 --zero 3 --zero-param-dtype bf16 \
      --resume "$dir/$model-bf16p-half.safetensors"
    same "$model-bf16p" "$model-bf16p-resumed" "$model np$np: --zero 3 --zero-param-dtype bf16 10 + resume + 10 == 20"
    if cmp -s "$dir/$model-ddp.safetensors" "$dir/$model-bf16p.safetensors"; then
      echo "FAIL $model np$np: --zero-param-dtype bf16 rounded nothing (DDP's bytes)"
      fails=$((fails + 1))
    else
      echo "ok   $model np$np: --zero-param-dtype bf16 is not DDP's fp32 run"
    fi
  done
fi
# Across stages 0-3 and world sizes 1-3 (SGD: AdamW turns summation-order rounding in near-zero gradients into
# relative differences near 1e-4): a state saved after 10 steps under stage S on NP ranks continues under stage
# (S + 1) mod 4, and each stage continues on every rank count that keeps the global batch (NP x 2 rows).
opt=sgd
run "$np" sgd20 gpt --steps 20
for z in 0 1 2 3; do
  run "$np" "sgd10-z$z" gpt --steps 10 --zero "$z"
done
for z in 0 1 2 3; do
  from=$(( (z + 3) % 4 ))
  for ranks in 1 2 3; do
    rows=$((np * 2 / ranks))
    [ $((rows * ranks)) = $((np * 2)) ] || continue  # the same global batch only
    run "$ranks" "to-z$z-np$ranks" gpt --steps 20 --zero "$z" --resume "$dir/sgd10-z$from.safetensors"
    rows=
    near "to-z$z-np$ranks" sgd20 "gpt sgd: --zero $from on $np ranks -> --zero $z on $ranks rank(s), near 20 straight"
  done
done
[ "$fails" = 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all ZeRO stage checks pass on $np ranks"
