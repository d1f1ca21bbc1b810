#!/usr/bin/env bash
# Real replicas on one GPU: the GPU data-parallel suite with 2 and 3 MPI ranks sharing the machine's GPU
# (--comm mpi --device cuda: CUDA tensors staged through pinned host buffers on the comm thread). Checks, for
# GPT and llama in fp32 and bf16 (tiny sizes, 10 steps): DDP overlap on == off to the byte; ZeRO 1, 2 and 3
# write DDP's bytes; ZeRO-3 gathering in bf16 (--zero-param-dtype bf16) keeps overlap on == off and 5 + --resume
# + 5 == 10; each comm hook (allreduce, bf16, powersgd) trains and keeps overlap on == off; N ranks
# are near 1 rank on the full batch (fp32); 5 + --resume + 5 == 10 (DDP, ZeRO-2, ZeRO-3); SIGTERM to rank 1
# stops both ranks with the state saved (exit 143) and the resumed run ends with the uninterrupted bytes; a
# stopped rank (SIGSTOP) ends the job through the watchdog. Also the CUDA cases of test_ddp under mpirun -np 2
# and 3 (tests/distributed/mpi_main.cpp picks mpi when ranks share a GPU).
# Usage: scripts/replicas-job.sh OUT   (builds build/ with CUDA when build/bin/minidp-train is missing, linking
# the carried Debian packages in .deps/root as scripts/gpu-job.sh does). Writes OUT/replicas-summary.txt.
# REPLICAS_DEVICE=cpu REPLICAS_BUILD=build-cpu runs the same plumbing on CPU ranks (fp32 only), to check the
# script itself where there is no GPU. A part of it: REPLICAS_MODELS="llama" REPLICAS_DTYPES="bf16" (section 2),
# REPLICAS_SIGNALS=0 (no SIGTERM and stopped-rank runs).
set -uo pipefail
out=${1:?usage: replicas-job.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deps=$PWD/.deps/root
mkdir -p /usr/share/games
[ -e /usr/share/games/fortunes ] || ln -s "$deps/usr/share/games/fortunes" /usr/share/games/
device=${REPLICAS_DEVICE:-cuda} build=${REPLICAS_BUILD:-build}
dtypes=(fp32 bf16)
[ "$device" = cuda ] || dtypes=(fp32)
[ -n "${REPLICAS_DTYPES:-}" ] && read -ra dtypes <<< "$REPLICAS_DTYPES"
read -ra models <<< "${REPLICAS_MODELS:-gpt llama}"
summary=$out/replicas-summary.txt
: > "$summary"
start=$(date +%s)
say() { echo "$*" | tee -a "$summary"; }
if [ ! -x "$build/bin/minidp-train" ] || [ ! -x "$build/tests/test_ddp" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" > "$out/cmake.log" 2>&1 &&
    cmake --build build -j"$(nproc)" --target minidp-train test_ddp > "$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; say "FAIL build"; exit 1; }
  say "build: $(( $(date +%s) - start )) s"
fi
train=$PWD/$build/bin/minidp-train
py=${MINIDP_PYTHON:-$(command -v python3)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
ok() { say "ok   $*"; }
fail() { say "FAIL $*"; fails=$((fails + 1)); }
model_args() {  # MODEL DTYPE
  local dtype=$2
  case $1 in
    gpt) echo --model gpt --data fortunes --layers 2 --heads 2 --embd 64 --context 32 --batch-size "${rows:-4}" --eval-batches 1 \
              --bucket-mb 0.02 --first-bucket-mb 0.005 --optimizer adamw --device "$device" --comm mpi --dtype "$dtype" ;;
    llama) echo --model llama --data fortunes --layers 2 --heads 2 --kv-heads 1 --embd 64 --hidden 160 --context 32 \
                --batch-size "${rows:-4}" --eval-batches 1 --bucket-mb 0.02 --first-bucket-mb 0.005 --optimizer adamw \
                --device "$device" --comm mpi --dtype "$dtype" ;;
  esac
}
run() {  # RANKS NAME MODEL DTYPE FLAG... -> $work/NAME.safetensors, $work/NAME.log
  local ranks=$1 name=$2 model=$3 dtype=$4
  shift 4
  local margs
  margs=$(model_args "$model" "$dtype")
  # --zero 3 has a bucket per unit: no bucket caps.
  case " $* " in *" --zero 3 "*) margs=$(echo "$margs" | sed -E 's/--(first-)?bucket-mb [0-9.]+//g') ;; esac
  # shellcheck disable=SC2086
  mpirun -np "$ranks" --oversubscribe "$train" $margs --log-every 5 "$@" \
    --save "$work/$name.safetensors" > "$work/$name.log" 2>&1 || { cp "$work/$name.log" "$out/"; return 1; }
}
same() { cmp -s "$work/$1.safetensors" "$work/$2.safetensors"; }
near() { "$py" tests/distributed/checkpoints_near.py "$work/$1.safetensors" "$work/$2.safetensors" "$3" | tail -n1; }

# 1. The CUDA cases of the DDP suite with ranks sharing the GPU.
filter='*CUDA*:*Cuda*:*cuda*'
[ "$device" = cuda ] || filter='*Zero*'
for np in 2 3; do
  if mpirun -np "$np" --oversubscribe "$build/tests/test_ddp" --gtest_filter="$filter" > "$out/test_ddp_np$np.log" 2>&1; then
    ok "test_ddp $filter, $np ranks on one GPU over mpi ($(grep -c 'OK \]' "$out/test_ddp_np$np.log") passed)"
  else
    fail "test_ddp CUDA cases, $np ranks (see test_ddp_np$np.log)"
  fi
done

# 2. DDP, the hooks and ZeRO 1/2/3 for GPT and llama in fp32 and bf16, on 2 and 3 ranks.
for np in 2 3; do
  for model in "${models[@]}"; do
    for dtype in "${dtypes[@]}"; do
      c="$model $dtype np$np"
      run "$np" ddp "$model" "$dtype" --steps 10 && run "$np" ddp_off "$model" "$dtype" --steps 10 --overlap off ||
        { fail "$c: DDP did not run"; continue; }
      same ddp ddp_off && ok "$c: DDP overlap on == off" || fail "$c: DDP overlap on != off"
      for z in 1 2 3; do
        if run "$np" z$z "$model" "$dtype" --steps 10 --zero $z; then
          same ddp z$z && ok "$c: --zero $z == DDP to the byte" || fail "$c: --zero $z != DDP ($(near z$z ddp 1e-5))"
        else
          fail "$c: --zero $z did not run"
        fi
      done
      # ZeRO-3 gathering in bf16: overlap on == off, and 5 + resume + 5 == 10 (the checkpoint gathers exactly).
      z3b=(--zero 3 --zero-param-dtype bf16)
      if run "$np" z3b "$model" "$dtype" --steps 10 "${z3b[@]}" &&
         run "$np" z3b_off "$model" "$dtype" --steps 10 "${z3b[@]}" --overlap off &&
         run "$np" z3b_half "$model" "$dtype" --steps 5 "${z3b[@]}" &&
         run "$np" z3b_resumed "$model" "$dtype" --steps 10 "${z3b[@]}" --resume "$work/z3b_half.safetensors"; then
        same z3b z3b_off && ok "$c: --zero 3 --zero-param-dtype bf16 overlap on == off" ||
          fail "$c: --zero 3 --zero-param-dtype bf16 overlap on != off"
        same z3b z3b_resumed && ok "$c: --zero 3 --zero-param-dtype bf16 5 + resume + 5 == 10" ||
          fail "$c: --zero 3 --zero-param-dtype bf16 5 + resume + 5 != 10"
      else
        fail "$c: --zero 3 --zero-param-dtype bf16 did not run"
      fi
      for hook in bf16 powersgd; do
        flags=(--comm-hook "$hook")
        [ "$hook" = powersgd ] && flags+=(--powersgd-rank 2 --powersgd-start-iter 3)
        if run "$np" "$hook" "$model" "$dtype" --steps 10 "${flags[@]}" &&
           run "$np" "${hook}_off" "$model" "$dtype" --steps 10 "${flags[@]}" --overlap off; then
          same "$hook" "${hook}_off" && ok "$c: --comm-hook $hook overlap on == off" ||
            fail "$c: --comm-hook $hook overlap on != off"
        else
          fail "$c: --comm-hook $hook did not run"
        fi
      done
      if [ "$dtype" = fp32 ]; then
        # One rank on the full batch (np x 4 rows): the same run up to the summation order.
        # shellcheck disable=SC2046
        rows=$((np * 4))
        if "$train" $(model_args "$model" fp32 | sed 's/--comm mpi//') --steps 10 --log-every 5 \
             --save "$work/one.safetensors" > "$work/one.log" 2>&1; then
          r=$(near ddp one 5e-3) && ok "$c: N ranks near 1 rank on the full batch ($r)" || fail "$c: N ranks vs 1 rank: $r"
        else
          fail "$c: the one-rank run did not run"
        fi
        rows=
        for z in 0 2 3; do
          run "$np" half "$model" fp32 --steps 5 --zero $z && run "$np" resumed "$model" fp32 --steps 10 --zero $z \
            --resume "$work/half.safetensors" && same ddp resumed && ok "$c: --zero $z 5 + resume + 5 == 10" ||
            fail "$c: --zero $z 5 + resume + 5 != 10"
        done
      fi
    done
  done
done

# 3. SIGTERM to rank 1 of 2: both stop at one step with the state saved, exit 143; the resumed run ends with
# the uninterrupted run's bytes. A stopped rank (SIGSTOP): the watchdog ends the job with one line.
rank_pid() {  # MPIRUN_PID RANK
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
wait_for() {  # FILE TEXT SECONDS
  for _ in $(seq $(( $3 * 10 ))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
if [ "${REPLICAS_SIGNALS:-1}" = 1 ]; then
  long=(--steps 1000)
  run 2 full gpt fp32 "${long[@]}" || fail "sigterm: the uninterrupted run did not run"
  # shellcheck disable=SC2046
  mpirun -np 2 --oversubscribe "$train" $(model_args gpt fp32) "${long[@]}" --log-every 5 --save "$work/stopped.safetensors" \
    > "$work/stopped.log" 2> "$work/stopped.err" &
  job=$!
  if wait_for "$work/stopped.log" "step 300/" 120; then kill -TERM "$(rank_pid $job 1)"; fi
  wait $job
  status=$?
  if [ $status = 143 ] && grep -q "stopped by SIGTERM after step" "$work/stopped.err" &&
     run 2 resumed gpt fp32 "${long[@]}" --resume "$work/stopped.safetensors" && same full resumed; then
    ok "SIGTERM to rank 1 of 2: exit 143, saved, resumed == uninterrupted ($(grep -o 'after step [0-9]*' "$work/stopped.err"))"
  else
    cp "$work/stopped.err" "$out/"
    fail "SIGTERM to rank 1 of 2: exit $status (see stopped.err)"
  fi
  # shellcheck disable=SC2046
  mpirun -np 2 --oversubscribe "$train" $(model_args gpt fp32) "${long[@]}" --log-every 5 --watchdog-s 10 \
    > "$work/hung.log" 2> "$work/hung.err" &
  job=$!
  if wait_for "$work/hung.log" "step 100/" 120; then
    victim=$(rank_pid $job 1)
    kill -STOP "$victim"
    stopped_at=$(date +%s)
  fi
  wait $job
  status=$?
  took=$(( $(date +%s) - ${stopped_at:-0} ))
  [ -n "${victim:-}" ] && kill -KILL "$victim" 2>/dev/null
  if [ $status != 0 ] && grep -q "watchdog" "$work/hung.err" && [ $took -lt 60 ]; then
    ok "a stopped rank: the job ends in $took s, exit $status: $(grep -m1 watchdog "$work/hung.err" | cut -c1-160)"
  else
    cp "$work/hung.err" "$out/"
    fail "a stopped rank: exit $status after $took s (see hung.err)"
  fi
fi
say "$fails failure(s); $(( $(date +%s) - start )) s in all on $( [ "$device" = cuda ] && nvidia-smi -L | head -n1 || echo "$device")"
[ "$fails" = 0 ]
