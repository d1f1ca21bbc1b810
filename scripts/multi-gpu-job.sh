#!/usr/bin/env bash
# The multi-GPU job: every figure docs/benchmarks.md needs from one host with N GPUs over one
# link setting, in one run (about 7 minutes on 2 H200s over NVLink, 10 over the socket link).
# Usage: [SECTIONS="..."] [STEPS=N] scripts/multi-gpu-job.sh OUTDIR [nvlink|socket]
#   SECTIONS (default: all of them but smlight, in this order): tests allreduce fp32 bf16 sparse zero torch weak
#   summary, and smlight; a subset runs those only (the device's 10-minute calls: the socket link in two calls into
#   one OUTDIR).
#   STEPS: timed steps per minidp run (default 10 on nvlink, 20 on the slower, noisier socket link).
#   DTYPE: compute precision, fp32 (default) or bf16 (minidp --dtype bf16; PyTorch autocast bf16 with
#   F.scaled_dot_product_attention, its fastest eager form).
#   nvlink: NCCL's defaults (NVLink / P2P between the GPUs of the host);
#   socket: NCCL's socket transport over loopback (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket
#           NCCL_SOCKET_IFNAME=lo): the path of two hosts without RDMA, about 2.6 GB/s.
# NCCL_NVLS_ENABLE=0 always. BUILD (default: build) is the build folder; its Python interpreter runs torch
# (scripts/python.sh: MINIDP_PYTHON, else the one BUILD was configured with).
# The shape is GPT-2 small: 12 layers, 12 heads, width 768, context 1024, vocab 50257
# (163 M parameters, untied head), fp32, batch 8 per GPU, random llm.c tokens.
#   1. nvidia-smi topo -m; on nvlink the data-parallel tests on the GPUs (test_ddp, test_sparse_rows and
#      test_grad_clip under mpirun -np N, tests/train/resume.py with its CUDA cases, and compute-sanitizer
#      memcheck of test_sparse_rows on one GPU);
#   2. raw all-reduce bandwidth at the bucket sizes (minidp-bench-allreduce: ncclAllReduce per size);
#   3. minidp-bench overlap off/on, bucket caps swept beside --bucket-mb auto, fp32 and --comm-hook bf16
#      (bf16 also with --sparse-embedding-grad)
#      (the fp32 sweep traced, one step of it drawn with plot_bench.py);
#   4. ZeRO-1 (--zero 1), parameters gathered at the end of the step, bucket by bucket, and bucket by bucket
#      waited on in the next forward (--zero-gather end|overlap|forward);
#   5. PyTorch DDP (torch_bench.py) at the same shape, precision, batch and caps, fp32 and bf16_compress_hook;
#   6. weak scaling: the same per-GPU batch on one GPU;
#   7. the side-by-side table (tools/dp_summary.py), printed last;
#   smlight (only when named): SM-light collectives, GPT-2 small in bf16 (--dtype bf16) at batch 8 and 25 MB
#      buckets, one minidp-bench run per NCCL setting: CTA policy default, efficiency, zero; symmetric buffers;
#      zero with symmetric buffers (bench_smlight_<setting>.{txt,json}: comm_ms and slowdown_ms per overlap row).
set -euo pipefail
out=${1:?usage: multi-gpu-job.sh OUTDIR [nvlink|socket]}
link=${2:-nvlink}
build=${BUILD:-build}
python=$(scripts/python.sh "$build")
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "$link" in
  nvlink) caps=5,25,100 steps=${STEPS:-10} ;;
  socket) export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo
          caps=5,25,100 steps=${STEPS:-20} ;;
  *) echo "link must be nvlink or socket, not '$link'" >&2; exit 2 ;;
esac
n=$(nvidia-smi -L | grep -c '^GPU')
forward=()
for v in NCCL_NVLS_ENABLE NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_NET NCCL_SOCKET_IFNAME; do
  [ -n "${!v:-}" ] && forward+=(-x "$v")
done
mpi=(mpirun -np "$n" --oversubscribe --bind-to none "${forward[@]}")
stamp() { echo "== $(date -u +%H:%M:%S) $*"; }
sections=" ${SECTIONS:-tests allreduce fp32 bf16 sparse zero torch weak summary} "
want() { [[ "$sections" == *" $1 "* ]]; }

# Random tokens in llm.c's format (header: magic, version, count; uint16 tokens), the largest id present so
# that the vocabulary is 50257.
tokens="$out/tokens"
mkdir -p "$tokens"
[ -f "$tokens/train.bin" ] || "$python" - "$tokens" <<'PY'
import random, struct, sys
rng = random.Random(0)
for name, count in (("train.bin", 1 << 21), ("val.bin", 1 << 16)):
    ids = [rng.randrange(50257) for _ in range(count)]
    ids[0] = 50256
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
        f.write(struct.pack(f"<{count}H", *ids))
PY
gpt=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --batch-size 8 --data llmc
     --llmc-train "$tokens/train.bin" --llmc-val "$tokens/val.bin" --device cuda)
bench=(--steps "$steps" --warmup 3 --repeats 1)
dtype=${DTYPE:-fp32}
case "$dtype" in
  fp32) torch_dtype=() ;;
  bf16) gpt+=(--dtype bf16); torch_dtype=(--dtype bf16 --attention sdpa) ;;
  *) echo "DTYPE must be fp32 or bf16, not '$dtype'" >&2; exit 2 ;;
esac
torch=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --batch-size 8 --steps "$steps"
       --warmup 3 --device cuda)

stamp "link $link, $n GPU(s), sections:$sections"
nvidia-smi topo -m > "$out/topo.txt"
if [ "$link" = nvlink ] && want tests; then
  stamp "data-parallel tests on the GPUs"
  # A failing test is reported and the job goes on to the benchmarks.
  for t in test_ddp test_sparse_rows test_grad_clip; do
    "${mpi[@]}" "$build/tests/$t" > "$out/${t}_np$n.log" 2>&1 || echo "FAILED: $t under mpirun -np $n"
    tail -n 3 "$out/${t}_np$n.log"
  done
  "$python" tests/train/resume.py "$(command -v mpiexec)" "$build/bin/minidp-train" > "$out/resume.log" 2>&1 ||
    echo "FAILED: tests/train/resume.py"
  grep -i "cuda" "$out/resume.log" | tail -n 5 || true
  status=0
  # API errors are not reported: NCCL's communicator set-up probes kernels with cudaFuncGetAttributes and
  # gets cudaErrorNoKernelImageForDevice (4 such reports, all inside ncclCommInitRankConfig, on 2026-11-30).
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 "$build/tests/test_sparse_rows" \
    > "$out/test_sparse_rows_memcheck.log" 2>&1 || status=$?
  summary=$(grep 'ERROR SUMMARY' "$out/test_sparse_rows_memcheck.log" || true)
  echo "compute-sanitizer memcheck test_sparse_rows: exit $status; $summary"
fi
if want allreduce; then
  stamp "raw all-reduce"
  "${mpi[@]}" "$build/bin/minidp-bench-allreduce" --device cuda --sizes-mb 1 5 25 100 200 --json "$out/allreduce.json" \
    | tee "$out/allreduce.txt"
fi
if want fp32; then
  stamp "minidp fp32 sweep"
  "${mpi[@]}" "$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list "auto,$caps" \
    --json "$out/bench_fp32.json" --trace "$out/trace_fp32.json" --trace-steps 1 > "$out/bench_fp32.txt" ||
    echo "FAILED: bench_fp32"
  tail -n 12 "$out/bench_fp32.txt"
fi
if want bf16; then
  stamp "minidp bf16 sweep"
  "${mpi[@]}" "$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list "auto,$caps" --comm-hook bf16 \
    --json "$out/bench_bf16.json" > "$out/bench_bf16.txt" || echo "FAILED: bench_bf16"
  tail -n 12 "$out/bench_bf16.txt"
fi
if want sparse; then
  stamp "minidp bf16 sweep, row-sparse embedding gradient (traced)"
  "${mpi[@]}" "$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list "auto,$caps" --comm-hook bf16 \
    --sparse-embedding-grad --json "$out/bench_bf16_sparse.json" --trace "$out/trace_bf16_sparse.json" --trace-steps 1 \
    > "$out/bench_bf16_sparse.txt" || echo "FAILED: bench_bf16_sparse"
  tail -n 12 "$out/bench_bf16_sparse.txt"
fi
if want zero; then
  for gather in end overlap forward; do
    stamp "minidp ZeRO-1, gather $gather"
    "${mpi[@]}" "$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list "${caps##*,}" --zero 1 \
      --zero-gather "$gather" --json "$out/bench_zero_$gather.json" > "$out/bench_zero_$gather.txt" ||
      echo "FAILED: bench_zero_$gather"
    tail -n 4 "$out/bench_zero_$gather.txt"
  done
fi
if want torch; then
  for precision in fp32 bf16; do
    stamp "PyTorch DDP $precision"
    "${mpi[@]}" "$python" tools/torch_bench.py "${torch[@]}" "${torch_dtype[@]}" --bucket-mb ${caps//,/ } \
      --grad-comm "$precision" \
      --json "$out/torch_$precision.json" | tee "$out/torch_$precision.txt" || echo "FAILED: torch_$precision"
  done
fi
if want weak; then
  stamp "weak scaling: one GPU"
  "$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list 25 --json "$out/weak_np1.json" \
    | tee "$out/weak_np1.txt" || echo "FAILED: weak_np1"
fi
if want smlight; then
  sm=("${gpt[@]}")
  [ "$dtype" = bf16 ] || sm+=(--dtype bf16)
  for setting in default efficiency zero symmetric zero+symmetric; do
    case "$setting" in
      symmetric) nccl=(--nccl-buffers symmetric) ;;
      zero+symmetric) nccl=(--nccl-cta-policy zero --nccl-buffers symmetric) ;;
      *) nccl=(--nccl-cta-policy "$setting") ;;
    esac
    stamp "minidp SM-light collectives: $setting"
    "${mpi[@]}" "$build/bin/minidp-bench" "${sm[@]}" "${bench[@]}" --bucket-mb-list 25 --comm nccl "${nccl[@]}" \
      --json "$out/bench_smlight_$setting.json" > "$out/bench_smlight_$setting.txt" 2>&1 ||
      echo "FAILED: bench_smlight_$setting"
    tail -n 4 "$out/bench_smlight_$setting.txt"
  done
fi
if want summary; then
  stamp "trace pictures"
  [ -f "$out/trace_fp32.json" ] && { "$python" tools/plot_bench.py --trace "$out/trace_fp32.json" \
    --match "bucket auto MB, overlap on" -o "$out/timeline_$link.png" || true; }
  [ -f "$out/trace_bf16_sparse.json" ] && { "$python" tools/plot_bench.py --trace "$out/trace_bf16_sparse.json" \
    --match "bucket 25 MB, overlap on" -o "$out/timeline_${link}_bf16_sparse.png" || true; }
  stamp "done"
  "$python" tools/dp_summary.py "$out" --link "$link" | tee "$out/summary.md"
fi
