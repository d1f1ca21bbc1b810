#!/usr/bin/env bash
# The attention kernels on one GPU (an H200 in mind), from a fresh clone, in about 5-8 minutes: builds
# test_flash_attention, minidp-train and minidp-bench-attention into /tmp/attn-build (-j16), then
#   1. minidp-bench-attention at head dims 64, 80, 96, 128 and 256 (alone on the GPU, for its timings);
#   2. test_flash_attention (every head dim against the CPU twin, lengths 1 to 257, NaN past the ends);
#   3. compute-sanitizer, all at once: initcheck, memcheck and racecheck over a short GPT run in bf16 and in
#      fp32 (2 layers, width 128, 2 heads, context 100, 3 steps); initcheck over the tests whose rows past
#      the sequence end are never written (UnwrittenTailIsNeverRead) and whose qkv comes from a bf16 linear
#      (AfterALinear); racecheck over the kernel tests at T = 100 (every head dim);
#   4. a bf16 shape without a kernel (--embd 120 --heads 2) must be refused in one line before the banner;
# and prints a summary last. Usage: scripts/attention-check.sh [OUTDIR]   (default /tmp/attn-check; where
# $OUT is set, as on the device tool's machines, the logs also go to $OUT/attention-check.tgz)
# Data: fortunes from /usr/share/games/fortunes, or from .deps/root as scripts/gpu-job.sh carries it (with
# CLI11 and nlohmann-json); without either, random llm.c tokens (scripts/make-random-tokens.py).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:-/tmp/attn-check}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
build=/tmp/attn-build
deps=$PWD/.deps/root
start=$(date +%s)
stamp() { echo "== $1 ($(( $(date +%s) - start )) s)"; }

stamp build
prefix=()
[ -d "$deps/usr" ] && prefix=(-DCMAKE_PREFIX_PATH="$deps/usr")
if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix[@]}" \
         >"$out/cmake.log" 2>&1 &&
       cmake --build "$build" -j16 --target test_flash_attention minidp-train minidp-bench-attention \
         >"$out/build.log" 2>&1; }; then
  tail -30 "$out/cmake.log" "$out/build.log"
  echo "SUMMARY: build failed"
  exit 1
fi
bin=$build/bin
tests=$build/tests

stamp data
fortunes=/usr/share/games/fortunes
[ -d "$fortunes" ] || fortunes=$deps/usr/share/games/fortunes
if [ -d "$fortunes" ]; then
  data=(--data fortunes --data-dir "$fortunes")
else
  python3 scripts/make-random-tokens.py /tmp/attn-tokens >/dev/null
  data=(--data llmc --llmc-train /tmp/attn-tokens/train.bin --llmc-val /tmp/attn-tokens/val.bin)
fi
echo "data: ${data[*]}"
common=(--model gpt --device cuda --layers 2 --context 100 --log-every 1 --eval-batches 2 "${data[@]}")
gpt=("${common[@]}" --embd 128 --heads 2 --steps 3)

stamp bench
timeout 100 "$bin/minidp-bench-attention" --head-dim 64,80,96,128,256 --batch 8 --seq 1024 >"$out/bench.txt" 2>&1
echo "bench exit $?" >>"$out/bench.txt"
cat "$out/bench.txt"

stamp "tests and sanitizers"
timeout 240 "$tests/test_flash_attention" --gtest_brief=1 >"$out/test.log" 2>&1 &
san() {  # san NAME TOOL ARGS...: compute-sanitizer TOOL over ARGS into $out/san_NAME.log
  local name=$1 tool=$2
  shift 2
  timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 20000 --show-backtrace no "$@" \
    >"$out/san_$name.log" 2>&1
  echo "exit $?" >>"$out/san_$name.log"
}
for dtype in bf16 fp32; do
  for tool in initcheck memcheck racecheck; do
    san "train_${dtype}_$tool" "$tool" "$bin/minidp-train" "${gpt[@]}" --dtype "$dtype" &
  done
done
san tests_initcheck_unwritten initcheck "$tests/test_flash_attention" --gtest_brief=1 \
  --gtest_filter='*UnwrittenTailIsNeverRead*' &
san tests_initcheck_linear initcheck "$tests/test_flash_attention" --gtest_brief=1 --gtest_filter='*AfterALinear*' &
san tests_racecheck racecheck "$tests/test_flash_attention" --gtest_brief=1 --gtest_filter='Shapes/*T100*' &
wait

stamp "shape refusal"
"$bin/minidp-train" "${common[@]}" --dtype bf16 --embd 120 --heads 2 --steps 1 >"$out/refusal.log" 2>&1
refusal=$?

# ---- summary ----
stamp summary
echo "---- test_flash_attention"
grep -E "tests? ran|PASSED|FAILED|SKIPPED" "$out/test.log" | tail -15
echo "---- compute-sanitizer (ERROR SUMMARY of each run; kernels of the errors printed, most first)"
for log in "$out"/san_*.log; do
  name=$(basename "$log" .log)
  summary=$(grep -m1 -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" || echo "no summary (timed out?)")
  gtest=$(grep -cE '^\[  (FAILED|SKIPPED) ' "$log")
  printf '%-34s %s; %s, gtest failed/skipped %s\n' "${name#san_}" "$summary" "$(tail -1 "$log")" "$gtest"
  grep -E "^=========     at " "$log" | sed -E 's/^=========     at (0x[0-9a-f]+ in )?//; s/\+0x[0-9a-f]+$//' |
    cut -c1-110 | sort | uniq -c | sort -rn | head -4 | sed 's/^/      /'
  grep -m2 -E "^========= (Uninitialized|Invalid|Race|Error|Warning)" "$log" | sed 's/^/      first: /'
done
echo "---- shape refusal: head dim 60 in bf16 (exit $refusal; want 1 and one error line naming --embd 120 and"
echo "     --heads 2, before the banner)"
cat "$out/refusal.log"
if [ "$refusal" -ne 0 ] && grep -q -- "error: .*--embd 120 / --heads 2" "$out/refusal.log" &&
   ! grep -q " parameters, " "$out/refusal.log"; then
  echo "refusal: ok"
else
  echo "refusal: NOT as wanted"
fi
echo "---- bench"
grep -E "^(flash|materialised|head dim)" "$out/bench.txt"
echo "SUMMARY: $(( $(date +%s) - start )) s; logs in $out"
[ -n "${OUT:-}" ] && tar czf "$OUT/attention-check.tgz" -C "$(dirname "$out")" "$(basename "$out")"
exit 0
