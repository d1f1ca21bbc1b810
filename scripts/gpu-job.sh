#!/usr/bin/env bash
# A device job on a lent GPU machine (no network there): link the carried Debian packages
# (.deps/root, made here by `apt-get download libcli11-dev nlohmann-json3-dev dataset-fashion-mnist fortunes
# fortunes-min` and `dpkg -x` each into .deps/root), build with CUDA, then run the named steps.
# Usage: scripts/gpu-job.sh OUTDIR STEP...   (steps: build test sanitize fast-step train-fortunes ...)
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

step_build() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >"$out/cmake.log" 2>&1 &&
    cmake --build build -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; return 1; }
  echo "build ok"
}
step_test() {
  (cd build && ctest -j8 --output-on-failure --timeout 600 >"$out/ctest.log" 2>&1)
  grep -E "tests passed|FAILED|Failed|\*\*\*" "$out/ctest.log" | tail -25
}
step_sanitize() {
  for t in build/tests/test_linalg build/tests/test_transformer_ops; do
    [ -x "$t" ] || continue
    for tool in memcheck racecheck; do
      compute-sanitizer --tool "$tool" --error-exitcode 3 "$t" --gtest_brief=1 >"$out/sanitize_$(basename "$t")_$tool.log" 2>&1
      echo "compute-sanitizer $tool $(basename "$t"): rc $? ($(grep -c 'ERROR SUMMARY: 0' "$out/sanitize_$(basename "$t")_$tool.log") clean summaries)"
    done
  done
}
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train "$out/tokens/train.bin"
      --llmc-val "$out/tokens/val.bin" --device cuda --optimizer adamw)
step_kernels() {
  build/bin/minidp-bench-attention 2>&1 | tee "$out/bench_attention.txt"
  python3 train/torch_attention_bench.py 2>&1 | tee "$out/torch_attention.txt"
  build/bin/minidp-bench-kernels 2>&1 | tee "$out/bench_kernels.txt"
}
# The GPT-2-small step (issue 9): minidp bf16 / fp32 beside PyTorch eager bf16 and torch.compile.
step_fast_step() {
  [ -f "$out/tokens/train.bin" ] || python3 scripts/make-random-tokens.py "$out/tokens"
  for b in 8 16; do
    build/bin/minidp-bench "${gpt2[@]}" --batch-size $b --dtype bf16 --steps 15 --warmup 5 --bucket-mb-list 25 \
      --json "$out/mdp_gpt2_bf16_b$b.json" >"$out/mdp_gpt2_bf16_b$b.txt" 2>&1; tail -4 "$out/mdp_gpt2_bf16_b$b.txt"
  done
  for b in 8 16; do
    python3 train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 \
      --dtype bf16 --compile ${COMPILE:-off on} --attention sdpa --batch-size $b --steps 15 --warmup 5 --device cuda \
      --json "$out/torch_gpt2_b$b.json" 2>&1 | tee "$out/torch_gpt2_b$b.txt" | tail -4
  done
}
# Where the GPU time of GPT-2-small bf16 steps goes: ncu kernel durations of steps after the warm-up.
step_profile() {
  [ -f "$out/tokens/train.bin" ] || python3 scripts/make-random-tokens.py "$out/tokens"
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip ${NCU_SKIP:-3000} \
    --launch-count ${NCU_COUNT:-1500} build/bin/minidp-train "${gpt2[@]}" --batch-size 8 --dtype bf16 --steps 8 \
    --log-every 8 --eval-batches 1 >"$out/ncu.csv" 2>"$out/ncu.err"
  python3 scripts/ncu-summary.py "$out/ncu.csv" 40
}
# Issue 10's two-link job on a machine with several GPUs (scripts/multi-gpu-job.sh).
step_multi_nvlink() { scripts/multi-gpu-job.sh "$out/nvlink" nvlink 2>&1 | tail -30; }
step_multi_socket() { scripts/multi-gpu-job.sh "$out/socket" socket 2>&1 | tail -30; }
for s in "$@"; do
  echo "== $s ($(date -u +%T))"
  "step_${s//-/_}"
done
# One archive of the logs (the device tool brings back few files); the token files stay behind.
[ -n "${OUT:-}" ] && tar czf "$OUT/job.tgz" --exclude=tokens -C "$(dirname "$out")" "$(basename "$out")"
