#!/usr/bin/env bash
# A device job on a lent GPU machine (no network there): link the carried Debian packages
# (.deps/root, made here by `apt-get download libcli11-dev nlohmann-json3-dev dataset-fashion-mnist fortunes
# fortunes-min` and `dpkg -x` each into .deps/root), build with CUDA, then run the named steps.
# Usage: scripts/gpu-job.sh OUTDIR STEP...   (steps: build test sanitize fast-step train-fortunes ...)
# BUILD_TARGETS="a b": the build step builds only these targets.
set -uo pipefail
out=${1:?usage: gpu-job.sh OUTDIR STEP...}
shift
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deps=$PWD/.deps/root
mkdir -p /usr/share/datasets /usr/share/games
[ -e /usr/share/datasets/fashion-mnist ] || ln -s "$deps/usr/share/datasets/fashion-mnist" /usr/share/datasets/
[ -e /usr/share/games/fortunes ] || ln -s "$deps/usr/share/games/fortunes" /usr/share/games/
gpus=$(nvidia-smi -L | grep -c '^GPU')
# The build's Python interpreter (scripts/python.sh: MINIDP_PYTHON, else the one build/ was configured with),
# looked up when a step first needs it, after step_build.
py() {
  [ -n "${MINIDP_PYTHON:-}" ] || MINIDP_PYTHON=$(scripts/python.sh build) || return 1
  "$MINIDP_PYTHON" "$@"
}

step_build() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >"$out/cmake.log" 2>&1 &&
    cmake --build build -j"$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS} >"$out/build.log" 2>&1 ||
    { tail -40 "$out/build.log"; return 1; }
  echo "build ok"
}
step_test() {
  (cd build && ctest -j8 --output-on-failure --timeout 600 >"$out/ctest.log" 2>&1)
  grep -E "tests passed|FAILED|Failed|\*\*\*" "$out/ctest.log" | tail -25
}
step_sanitize() {
  local logs=()
  # test_flash_attention twice: on an H100 its bf16 cases take the Hopper kernels by default, the cp.async ones
  # under MINIDP_ATTENTION=cp.async.
  for t in ${SANITIZE_TESTS:-test_flash_attention test_flash_attention:cp.async test_fused_ops test_classifier test_elementwise_kernels}; do
    for tool in memcheck racecheck; do
      log="$out/sanitize_${t/:/_}_$tool.log"
      logs+=("$log")
      MINIDP_ATTENTION=$([[ $t == *:* ]] && echo "${t#*:}" || echo auto) timeout ${SANITIZE_TIMEOUT:-240} \
        compute-sanitizer --tool "$tool" --error-exitcode 3 "build/tests/${t%%:*}" --gtest_brief=1 >"$log" 2>&1 &
    done
  done
  wait
  for log in "${logs[@]}"; do
    echo "$(basename "$log" .log): $(grep -m1 'ERROR SUMMARY' "$log" || echo 'no summary (timed out?)'); $(grep -cE '^\[  (FAILED|SKIPPED) ' "$log") failed/skipped"
  done
}
# compute-sanitizer racecheck over the CUDA cases of the kernel tests (CPU-only cases filtered out, the
# largest flash shape too), started in the background; fortunes-wait waits for it and prints the summaries.
step_racecheck() {
  for t in test_flash_attention test_fused_ops test_classifier test_elementwise_kernels; do
    timeout ${SANITIZE_TIMEOUT:-240} compute-sanitizer --tool racecheck --error-exitcode 3 "build/tests/$t" \
      --gtest_brief=1 --gtest_filter='*Cuda*:*Bf16*:*CUDA*:-*B32T256*:*Gpt2Vocabulary*' >"$out/racecheck_$t.log" 2>&1 &
  done
}
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train "$out/tokens/train.bin"
      --llmc-val "$out/tokens/val.bin" --device cuda --optimizer adamw)
step_kernels() {
  build/bin/minidp-bench-attention 2>&1 | tee "$out/bench_attention.txt"
  py tools/torch_attention_bench.py 2>&1 | tee "$out/torch_attention.txt"
  build/bin/minidp-bench-kernels 2>&1 | tee "$out/bench_kernels.txt"
}
# The GPT-2-small step: minidp bf16 / fp32 beside PyTorch eager bf16 and torch.compile in each of COMPILE_MODES
# (default: default and max-autotune-no-cudagraphs; "compile" in a table is the faster of them).
step_fast_step() {
  [ -f "$out/tokens/train.bin" ] || py scripts/make-random-tokens.py "$out/tokens"
  for run in "8" "16" "8 --cuda-graph" "16 --cuda-graph"; do
    set -- $run
    local name="mdp_gpt2_bf16_b$1${2:+_graph}"
    build/bin/minidp-bench "${gpt2[@]}" --batch-size "$@" --dtype bf16 --steps 15 --warmup 5 --bucket-mb-list 25 \
      --json "$out/$name.json" >"$out/$name.txt" 2>&1; echo "$name"; tail -3 "$out/$name.txt"
  done
  for b in 8 16; do
    py tools/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 \
      --dtype bf16 --compile ${COMPILE:-off on} --compile-mode ${COMPILE_MODES:-default max-autotune-no-cudagraphs} \
      --attention sdpa --batch-size $b --steps 15 --warmup 5 --device cuda \
      --json "$out/torch_gpt2_b$b.json" 2>&1 | tee "$out/torch_gpt2_b$b.txt" | tail -4
  done
}
# The llama model at width 1024, 8 query and 4 key/value heads (head dim 128), SwiGLU 2816, 12 layers, context
# 1024, vocabulary 32000, batch 8, bf16: minidp against PyTorch eager and torch.compile (SDPA with GQA; each of
# COMPILE_MODES).
step_llama_speed() {
  [ -f "$out/tokens32k/train.bin" ] || py scripts/make-random-tokens.py "$out/tokens32k" 32000
  local shape=(--layers 12 --embd 1024 --heads 8 --kv-heads 4 --hidden 2816 --context 1024)
  build/bin/minidp-bench --model llama "${shape[@]}" --data llmc --llmc-train "$out/tokens32k/train.bin" \
    --llmc-val "$out/tokens32k/val.bin" --device cuda --optimizer adamw --batch-size ${LLAMA_BATCH:-8} --dtype bf16 \
    --steps 15 --warmup 5 --bucket-mb-list 25 --json "$out/mdp_llama_bf16.json" >"$out/mdp_llama_bf16.txt" 2>&1
  tail -3 "$out/mdp_llama_bf16.txt"
  py tools/torch_bench.py --model llama "${shape[@]}" --vocab 32000 --dtype bf16 --compile ${COMPILE:-off on} \
    --compile-mode ${COMPILE_MODES:-default max-autotune-no-cudagraphs} --attention sdpa --batch-size ${LLAMA_BATCH:-8} --steps 15 --warmup 5 --device cuda \
    --json "$out/torch_llama_bf16.json" 2>&1 | tee "$out/torch_llama_bf16.txt" | tail -4
}
# The shape grid (scripts/shape-grid.sh): minidp beside the anchor's compile modes on GPT and LLaMA shapes over
# the visible GPUs, and attention beside SDPA; GRID_ARGS go to tools/shape_grid.py (e.g. --no-max-autotune).
step_shape_grid() { scripts/shape-grid.sh "$out/grid" ${GRID_ARGS:-}; }
# minidp alone at the GPT-2-small shape, batch 8 and 16 (a quick check between full fast-step jobs).
step_bench_mdp() {
  [ -f "$out/tokens/train.bin" ] || py scripts/make-random-tokens.py "$out/tokens"
  for b in 8 16; do
    build/bin/minidp-bench "${gpt2[@]}" --batch-size $b --dtype bf16 --steps 15 --warmup 5 --bucket-mb-list 25 \
      --json "$out/mdp_gpt2_bf16_b$b.json" >"$out/mdp_gpt2_bf16_b$b.txt" 2>&1; echo "b$b"; tail -2 "$out/mdp_gpt2_bf16_b$b.txt"
  done
}
# The bf16 fortunes gap: fp32 and bf16 pairs at shapes that each change one dimension (scripts/bf16-bisect.sh).
step_bisect() { scripts/bf16-bisect.sh "$out/bisect"; }
# Where the GPU time of GPT-2-small bf16 steps goes: ncu kernel durations of steps after the warm-up.
step_profile() {
  [ -f "$out/tokens/train.bin" ] || py scripts/make-random-tokens.py "$out/tokens"
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip ${NCU_SKIP:-3000} \
    --launch-count ${NCU_COUNT:-1500} build/bin/minidp-train "${gpt2[@]}" --batch-size ${PROFILE_BATCH:-8} --dtype bf16 --steps 8 \
    --log-every 8 --eval-batches 1 >"$out/ncu.csv" 2>"$out/ncu.err"
  py scripts/ncu-summary.py "$out/ncu.csv" 40
}
# The same for the llama model at the width-1024 shape of llama-speed (batch 8).
step_profile_llama() {
  [ -f "$out/tokens32k/train.bin" ] || py scripts/make-random-tokens.py "$out/tokens32k" 32000
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip ${NCU_SKIP:-3000} \
    --launch-count ${NCU_COUNT:-1500} build/bin/minidp-train --model llama --layers 12 --embd 1024 --heads 8 \
    --kv-heads 4 --hidden 2816 --context 1024 --data llmc --llmc-train "$out/tokens32k/train.bin" \
    --llmc-val "$out/tokens32k/val.bin" --device cuda --optimizer adamw --batch-size 8 --dtype bf16 --steps 8 \
    --log-every 8 --eval-batches 1 >"$out/ncu_llama.csv" 2>"$out/ncu_llama.err"
  py scripts/ncu-summary.py "$out/ncu_llama.csv" 40
}
# Where the GPU time of minidp-bench-block goes (the built-in block and the composed one, 3 passes each).
step_profile_block() {
  ncu --clock-control none --metrics gpu__time_duration.sum --csv build/bin/minidp-bench-block --repeats 3 \
    >"$out/ncu_block.csv" 2>"$out/ncu_block.err"
  py scripts/ncu-summary.py "$out/ncu_block.csv" 40
}
# compute-sanitizer's memcheck, initcheck and racecheck over short training runs of the whole program: GPT and
# llama, fp32 and bf16, with and without --cuda-graph (fortunes, 3 steps, validation on), run side by side.
# bf16 initcheck runs take --plain-gemms: initcheck does not see the writes of cuBLASLt's TMA kernels.
step_whole_sanitize() {
  local gpt=(--model gpt --layers 2 --embd 128 --heads 2 --context 100)
  local llama=(--model llama --layers 2 --embd 256 --heads 4 --kv-heads 2 --hidden 640 --context 100)
  local logs=() m d g tool log
  for m in gpt llama; do
    local -n shape=$m
    for d in fp32 bf16; do
      for g in eager graph; do
        for tool in ${WHOLE_SANITIZE_TOOLS:-memcheck initcheck racecheck}; do
          log="$out/whole_${tool}_${m}_${d}_$g.log"
          logs+=("$log")
          timeout ${SANITIZE_TIMEOUT:-420} compute-sanitizer --tool "$tool" --error-exitcode 3 build/bin/minidp-train \
            "${shape[@]}" --data fortunes --device cuda --dtype $d --batch-size 4 --steps 3 --log-every 1 \
            --eval-every 3 --eval-batches 1 $([ $g = graph ] && echo --cuda-graph) \
            $([ $d = bf16 ] && [ $tool = initcheck ] && echo --plain-gemms) >"$log" 2>&1 &
        done
      done
    done
  done
  wait
  for log in "${logs[@]}"; do
    echo "$(basename "$log" .log): $(grep -m1 'ERROR SUMMARY' "$log" || echo "no summary: $(tail -1 "$log")")"
  done
}
# The fortunes GPT (10.9 M) trained 3000 steps: fp32 constant lr (the reference run), fp32 with warm-up,
# cosine decay and clipping, and bf16 compute; run together on one GPU (loss, not speed).
fortunes=(--model gpt --data fortunes --device cuda --layers 6 --heads 6 --embd 384 --context 256 --batch-size 32
          --steps 3000 --log-every 250 --eval-every 250)
step_fortunes() {
  [ -n "${FORTUNES_CONSTANT:-}" ] &&
    build/bin/minidp-train "${fortunes[@]}" --metrics "$out/constant.jsonl" >"$out/fortunes_constant.log" 2>&1 &
  build/bin/minidp-train "${fortunes[@]}" --lr-schedule cosine --warmup-steps 100 --clip-grad-norm 1 \
    --metrics "$out/cosine.jsonl" --sample 200 >"$out/fortunes_cosine.log" 2>&1 &
  build/bin/minidp-train "${fortunes[@]}" --dtype bf16 --metrics "$out/bf16.jsonl" >"$out/fortunes_bf16.log" 2>&1 &
}
# The same at other seeds (the default is 1234): whether the bf16 gap is systematic or the timing of the
# escape from the early plateau. Waited for by fortunes-wait.
step_fortunes_seeds() {
  for seed in 1 2; do
    build/bin/minidp-train "${fortunes[@]}" --dtype bf16 --seed $seed --metrics "$out/bf16_seed$seed.jsonl" \
      >"$out/fortunes_bf16_seed$seed.log" 2>&1 &
  done
  build/bin/minidp-train "${fortunes[@]}" --seed 1 --metrics "$out/fp32_seed1.jsonl" >"$out/fortunes_fp32_seed1.log" 2>&1 &
  build/bin/minidp-train "${fortunes[@]}" --dtype bf16 --lr-schedule cosine --warmup-steps 100 --clip-grad-norm 1 \
    --metrics "$out/bf16_cosine.jsonl" >"$out/fortunes_bf16_cosine.log" 2>&1 &
  build/bin/minidp-train "${fortunes[@]}" --dtype bf16 --residual fp32 --metrics "$out/bf16_residual32.jsonl" \
    >"$out/fortunes_bf16_residual32.log" 2>&1 &
}
step_fortunes_wait() {
  wait
  grep -H "validation loss" "$out"/fortunes_*.log
  for log in "$out"/racecheck_*.log; do
    [ -f "$log" ] && echo "$(basename "$log" .log): $(grep -m1 'RACECHECK SUMMARY' "$log" || echo 'no summary (timed out?)'); $(grep -cE '^\[  (PASSED|OK) ' "$log") passed lines"
  done
  [ -f "$out/cosine.jsonl" ] &&
    { py tools/plot_metrics.py "$out/cosine.jsonl" "$out/bf16.jsonl" -o "$out/loop_h200_fortunes.png" \
      --title "fortunes GPT 10.9M, H200" >/dev/null 2>&1 || echo "plot failed"; }
}
# Comm hooks on the emulated 2-rank link at 3 GB/s (100 us), GPT-2 small, bf16 compute, batch 8: the one-GPU step
# of the same job first, then each hook with overlap off and on per bucket cap (compute_ms on - off: the compute
# slowdown beside the link). HOOK_RUNS: the runs, ';'-separated --comm-hook arguments; HOOK_CAPS: the caps.
step_hooks_emulated() {
  [ -f "$out/tokens/train.bin" ] || py scripts/make-random-tokens.py "$out/tokens"
  local emu=(--comm emulated --emulated-world 2 --emulated-gbps 3 --emulated-latency-us 100)
  build/bin/minidp-bench "${gpt2[@]}" --batch-size 8 --dtype bf16 --steps 15 --warmup 5 --bucket-mb-list 25 \
    --json "$out/hooks_one_gpu.json" >"$out/hooks_one_gpu.txt" 2>&1; echo one-gpu; tail -2 "$out/hooks_one_gpu.txt"
  local runs="bf16;bf16 --sparse-embedding-grad;powersgd --powersgd-rank 4;powersgd --powersgd-rank 1"
  runs+=";powersgd --powersgd-rank 4 --sparse-embedding-grad"
  local IFS_=$IFS
  IFS=';'
  local list=(${HOOK_RUNS:-$runs})
  IFS=$IFS_
  for run in "${list[@]}"; do
    set -- $run
    local name="hooks_emu3_$(echo "$run" | tr -d '-' | tr ' ' '_')"
    local start=()  # PowerSGD's own flag: the other hooks refuse it
    [ "$1" = powersgd ] && start=(--powersgd-start-iter 2)
    build/bin/minidp-bench "${gpt2[@]}" "${emu[@]}" --batch-size 8 --dtype bf16 --steps 15 --warmup 5 \
      --bucket-mb-list ${HOOK_CAPS:-5,25,100} --comm-hook "$@" "${start[@]}" --json "$out/$name.json" \
      >"$out/$name.txt" 2>&1; echo "$name"; tail -$((2 * $(echo ${HOOK_CAPS:-5,25,100} | tr ',' '\n' | wc -l) + 1)) "$out/$name.txt"
  done
}
# Where PowerSGD's comm-stream time goes: ncu kernel durations of compressed steps of GPT-2 small, bf16, on the
# emulated 2-rank 3 GB/s link (the link's own kernel is emulatedLink).
step_psgd_profile() {
  [ -f "$out/tokens/train.bin" ] || py scripts/make-random-tokens.py "$out/tokens"
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip ${NCU_SKIP:-6000} \
    --launch-count ${NCU_COUNT:-3000} build/bin/minidp-train "${gpt2[@]}" --batch-size 8 --dtype bf16 --steps 10 \
    --log-every 10 --eval-batches 1 --comm emulated --emulated-world 2 --emulated-gbps 3 --emulated-latency-us 100 \
    --comm-hook powersgd --powersgd-rank ${PSGD_RANK:-8} --powersgd-start-iter 2 --bucket-mb 100 \
    >"$out/ncu_psgd.csv" 2>"$out/ncu_psgd.err"
  py scripts/ncu-summary.py "$out/ncu_psgd.csv" 40
}
# The fortunes GPT (10.9 M) with PowerSGD rank 4 against dense all-reduce, equal steps, warm-up + cosine + clip,
# on the emulated 2-rank link (identical ranks: the compression of the whole batch's gradient); run together
# (loss, not speed); both curves in one picture.
step_powersgd_fortunes() {
  local loop=(--lr-schedule cosine --warmup-steps 100 --clip-grad-norm 1 --comm emulated --emulated-world 2)
  build/bin/minidp-train "${fortunes[@]}" "${loop[@]}" --metrics "$out/psgd_dense.jsonl" >"$out/psgd_dense.log" 2>&1 &
  local curves=("$out/psgd_dense.jsonl")
  for r in ${PSGD_RANKS:-1 4}; do
    build/bin/minidp-train "${fortunes[@]}" "${loop[@]}" --comm-hook powersgd --powersgd-rank $r \
      --powersgd-start-iter 100 --metrics "$out/psgd_r$r.jsonl" >"$out/psgd_r$r.log" 2>&1 &
    curves+=("$out/psgd_r$r.jsonl")
  done
  wait
  grep -H "validation loss" "$out"/psgd_*.log
  py tools/plot_metrics.py "${curves[@]}" -o "$out/powersgd_fortunes.png" \
    --title "fortunes GPT 10.9M: dense all-reduce and PowerSGD rank ${PSGD_RANKS:-1 4}, H200" >/dev/null 2>&1 ||
    echo "plot failed"
}
step_mlp_graph() {
  for g in "" --cuda-graph; do
    build/bin/minidp-bench --model mlp --device cuda --steps 200 --warmup 20 --bucket-mb-list 25 $g \
      --json "$out/mlp${g}.json" >"$out/mlp${g}.txt" 2>&1; tail -2 "$out/mlp${g}.txt"
  done
}
# The GPU tests and runs of code compiled but not yet run on a GPU (the llama model's packed flash attention
# and bf16, fused RMSNorm, trailing broadcasts and RoPE from ops, PowerSGD's products, the NCCL settings on one
# rank), compute-sanitizer memcheck over a short llama bf16 run, and the built-in against the composed block.
step_unverified() {
  # From the source root, as ctest runs them (the fixtures' paths are relative to it).
  for t in test_sequence_ops test_bf16_step test_powersgd test_composite_ops test_transformer_ops test_fused_ops \
           test_reference; do
    build/tests/$t --gtest_brief=1 >"$out/unverified_$t.log" 2>&1; echo "$t: $(tail -1 "$out/unverified_$t.log")"
    grep -E '^\[  FAILED' "$out/unverified_$t.log" | head -5
  done
  build/tests/test_loop --gtest_filter='MemoryEstimate.*' --gtest_brief=1 >"$out/unverified_memory.log" 2>&1
  tail -3 "$out/unverified_memory.log"
  build/bin/minidp-bench-block --max-error 0.05 2>&1 | tee "$out/bench_block.txt"
  local llama=(--model llama --data fortunes --device cuda --layers 2 --embd 256 --heads 4 --kv-heads 2 --context 128
               --batch-size 8 --log-every 20 --eval-batches 2)
  build/bin/minidp-train "${llama[@]}" --dtype bf16 --steps 60 2>&1 | tail -3
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 build/bin/minidp-train "${llama[@]}" --dtype bf16 \
    --steps 4 >"$out/memcheck_llama_bf16.log" 2>&1; grep -m1 "ERROR SUMMARY" "$out/memcheck_llama_bf16.log"
  for s in "--nccl-cta-policy efficiency" "--nccl-buffers registered" "--nccl-buffers symmetric"; do
    mpirun -np 1 build/bin/minidp-train --model gpt --data fortunes --device cuda --steps 20 --log-every 20 \
      --eval-batches 1 --comm nccl $s 2>&1 | grep -E "communicator|step 20|rror" | head -3
  done
}
# The Hopper (sm_90a) attention kernels: their tests, each group in its own process (a barrier-wait fault ends the
# CUDA context of the process it happens in), the existing attention suite through them, compute-sanitizer memcheck
# and racecheck on a few shapes, and minidp-bench-attention --sm90 beside the cp.async kernels.
step_sm90() {
  # SM90_TIMEOUT: each test process's limit (240 s); SM90_BENCH=0 leaves out the bench.
  local t=build/tests/test_flash_attention_sm90 log=$out/sm90 limit=${SM90_TIMEOUT:-240}
  mkdir -p "$log"
  # The sanitizers run beside the tests (each process its own GPU context; correctness does not depend on
  # sharing the GPU); the bench runs last, alone.
  for tool in memcheck racecheck; do
    timeout "$limit" compute-sanitizer --tool $tool --error-exitcode 3 $t --gtest_brief=1 \
      --gtest_filter='Shapes/HopperAttention*T65*-*PingPong*' >"$log/$tool.txt" 2>&1 &
  done
  local groups=("HopperAttentionReference.*:HopperAttentionDevice.*" "Shapes/HopperAttention.*-*PingPong*"
                "Shapes/HopperAttentionBackward.*" "*PingPong*")
  for i in "${!groups[@]}"; do
    timeout "$limit" $t --gtest_brief=1 --gtest_filter="${groups[$i]}" >"$log/test_$i.txt" 2>&1
    echo "sm90 tests '${groups[$i]}': rc $?, $(grep -E '^\[  (PASSED|FAILED) ' "$log/test_$i.txt" | tr '\n' ' ')"
  done
  for mode in auto cp.async sm90-bwd; do
    MINIDP_ATTENTION=$mode timeout "$limit" build/tests/test_flash_attention --gtest_brief=1 >"$log/suite_$mode.txt" 2>&1 &
  done
  wait
  for mode in auto cp.async sm90-bwd; do
    echo "test_flash_attention with MINIDP_ATTENTION=$mode: $(grep -E '^\[  (PASSED|FAILED) ' "$log/suite_$mode.txt" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]' "$log/suite_$mode.txt" | head -5
  done
  for tool in memcheck racecheck; do
    echo "$tool: $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log/$tool.txt" || echo 'no summary (timed out?)')"
  done
  if [ "${SM90_BENCH:-1}" = 1 ]; then
    timeout 180 build/bin/minidp-bench-attention --sm90 \
      --shapes 4:16:16:4096:128,4:32:32:4096:64,8:16:4:2048:128,4:8:8:4096:256,2:32:4:8192:128 2>&1 | tee "$log/bench.txt"
  fi
}
# The attention kernels in training (TOKENS: a folder with gpt2/ and llama/ llm.c token files, made by
# scripts/make-random-tokens.py): compute-sanitizer memcheck and racecheck over short bf16 runs (llama at head dim
# 128, GPT at 64) with the default kernels; then the step in the default mode against MINIDP_ATTENTION=cp.async,
# alternating (ATTENTION_ROUNDS rounds, default 1), on shapes of head dim 64, 128 and 256.
step_attention_steps() {
  local tok=${TOKENS:-$out/tokens} log=$out/attention_steps
  mkdir -p "$log"
  for v in gpt2:50257 llama:32000; do
    [ -f "$tok/${v%%:*}/train.bin" ] || py scripts/make-random-tokens.py "$tok/${v%%:*}" "${v##*:}"
  done
  local llama=(--model llama --data llmc --llmc-train "$tok/llama/train.bin" --llmc-val "$tok/llama/val.bin")
  local gpt=(--model gpt --data llmc --llmc-train "$tok/gpt2/train.bin" --llmc-val "$tok/gpt2/val.bin")
  local run=(build/bin/minidp-bench --device cuda --dtype bf16 --optimizer adamw --bucket-mb-list 25)
  local tiny=(--layers 2 --embd 256 --context 200 --batch-size 2 --steps 2 --warmup 1)
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 "${run[@]}" "${llama[@]}" "${tiny[@]}" --heads 2 \
      --kv-heads 1 --hidden 512 >"$log/${tool}_llama.txt" 2>&1 &
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 "${run[@]}" "${gpt[@]}" "${tiny[@]}" --heads 4 \
      >"$log/${tool}_gpt.txt" 2>&1 &
  done
  wait
  for f in "$log"/{memcheck,racecheck}_*.txt; do
    echo "$(basename "$f" .txt): $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" || echo 'no summary (timed out?)')"
  done
  local shapes=("llama-d128|${llama[*]} --layers 12 --heads 8 --kv-heads 4 --embd 1024 --hidden 2816 --context 1024 --batch-size 8"
                "tinyllama-d64|${llama[*]} --layers 8 --heads 32 --kv-heads 4 --embd 2048 --hidden 5632 --context 2048 --batch-size 2"
                "gpt-d128-ctx4k|${gpt[*]} --layers 6 --heads 12 --embd 1536 --context 4096 --batch-size 2"
                "llama-d256|${llama[*]} --layers 6 --heads 8 --kv-heads 8 --embd 2048 --hidden 5632 --context 4096 --batch-size 1"
                "gpt2-b16|${gpt[*]} --layers 12 --heads 12 --embd 768 --context 1024 --batch-size 16")
  for entry in "${shapes[@]}"; do
    local name=${entry%%|*} args
    read -r -a args <<<"${entry#*|}"
    for round in $(seq "${ATTENTION_ROUNDS:-1}"); do
      for mode in auto cp.async; do
        MINIDP_ATTENTION=$mode timeout 120 "${run[@]}" "${args[@]}" --steps 20 --warmup 5 \
          >"$log/${name}_${mode}_$round.txt" 2>&1
        echo "$name $mode round $round (rc $?): $(grep -E '^ +high' "$log/${name}_${mode}_$round.txt" |
          awk '{printf "%s %s ms, peak %s MiB; ", $5, $6, $14}')"
      done
    done
  done
}
# ZeRO on the emulated 8-rank link (scripts/zero-emulated-job.sh): DDP against ZeRO-3 for GPT-2 small and the llama
# shape, peak memory at 443 M parameters, a 5.9 B llama under ZeRO-3.
step_zero_emulated() { scripts/zero-emulated-job.sh "$out/zero_emulated" build/bin 2>&1 | tail -60; }
# The two-link job on a machine with several GPUs (scripts/multi-gpu-job.sh): NVLink, and NCCL's socket transport.
step_multi_nvlink() { scripts/multi-gpu-job.sh "$out/nvlink" nvlink 2>&1 | tail -30; }
step_multi_socket() { scripts/multi-gpu-job.sh "$out/socket" socket 2>&1 | tail -30; }
# SM-light collectives over NVLink: minidp-bench per NCCL CTA policy and buffer kind (multi-gpu-job.sh's smlight).
step_multi_smlight() { SECTIONS=smlight scripts/multi-gpu-job.sh "$out/smlight" nvlink 2>&1 | tail -30; }
for s in "$@"; do
  echo "== $s ($(date -u +%T))"
  "step_${s//-/_}"
done
# One archive of the logs (the device tool brings back few files); the token files stay behind.
[ -n "${OUT:-}" ] && tar czf "$OUT/job.tgz" --exclude=tokens -C "$(dirname "$out")" "$(basename "$out")"
