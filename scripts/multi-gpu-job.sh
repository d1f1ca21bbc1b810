#!/usr/bin/env bash
# The multi-GPU job (issues 6, 10): every figure docs/benchmarks.md needs from one host with N GPUs over one
# link setting, in one run (about 8 minutes on 2 H200s). Usage: scripts/multi-gpu-job.sh OUTDIR [nvlink|socket]
#   nvlink: NCCL's defaults (NVLink / P2P between the GPUs of the host);
#   socket: NCCL's socket transport over loopback (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket
#           NCCL_SOCKET_IFNAME=lo): the path of two hosts without RDMA, about 2.6 GB/s.
# NCCL_NVLS_ENABLE=0 always. BUILD (default: build) is the build folder, PYTHON (default: python3) runs torch.
# The shape is GPT-2 small as issue 10 measured it: 12 layers, 12 heads, width 768, context 1024, vocab 50257
# (163 M parameters, untied head), fp32, batch 8 per GPU, random llm.c tokens.
#   1. nvidia-smi topo -m; on nvlink the data-parallel tests on the GPUs (test_ddp under mpirun -np N);
#   2. raw all-reduce bandwidth at the bucket sizes (minidp-bench-allreduce: ncclAllReduce per size);
#   3. minidp-bench overlap off/on, bucket caps swept beside --bucket-mb auto, fp32 and --grad-comm bf16
#      (bf16 also with --sparse-embedding-grad)
#      (the fp32 sweep traced, one step of it drawn with plot_bench.py);
#   4. ZeRO-1 (--zero 1), parameters gathered at the end of the step and bucket by bucket;
#   5. PyTorch DDP (torch_bench.py) at the same shape, precision, batch and caps, fp32 and bf16_compress_hook;
#   6. weak scaling: the same per-GPU batch on one GPU;
#   7. the side-by-side table (train/dp_summary.py), printed last.
set -euo pipefail
out=${1:?usage: multi-gpu-job.sh OUTDIR [nvlink|socket]}
link=${2:-nvlink}
build=${BUILD:-build}
python=${PYTHON:-python3}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "$link" in
  nvlink) caps=5,25,100 ;;
  socket) export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo
          caps=25,100,200 ;;
  *) echo "link must be nvlink or socket, not '$link'" >&2; exit 2 ;;
esac
n=$(nvidia-smi -L | grep -c '^GPU')
forward=()
for v in NCCL_NVLS_ENABLE NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_NET NCCL_SOCKET_IFNAME; do
  [ -n "${!v:-}" ] && forward+=(-x "$v")
done
mpi=(mpirun -np "$n" --oversubscribe --bind-to none "${forward[@]}")
stamp() { echo "== $(date -u +%H:%M:%S) $*"; }

# Random tokens in llm.c's format (header: magic, version, count; uint16 tokens), the largest id present so
# that the vocabulary is 50257.
tokens="$out/tokens"
mkdir -p "$tokens"
"$python" - "$tokens" <<'PY'
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
bench=(--steps 10 --warmup 3 --repeats 1)
torch=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --batch-size 8 --steps 10
       --warmup 3 --device cuda)

stamp "link $link, $n GPU(s)"
nvidia-smi topo -m | tee "$out/topo.txt"
if [ "$link" = nvlink ]; then
  stamp "test_ddp on the GPUs"
  "${mpi[@]}" "$build/tests/test_ddp" 2>&1 | tee "$out/test_ddp_np$n.log" | tail -3
  "${mpi[@]}" "$build/tests/test_sparse_rows" 2>&1 | tee "$out/test_sparse_rows_np$n.log" | tail -3
fi
stamp "raw all-reduce"
"${mpi[@]}" "$build/bin/minidp-bench-allreduce" --device cuda --sizes-mb 1 5 25 100 200 --json "$out/allreduce.json" \
  | tee "$out/allreduce.txt"
stamp "minidp fp32 sweep"
"${mpi[@]}" "$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list "auto,$caps" \
  --json "$out/bench_fp32.json" --trace "$out/trace_fp32.json" --trace-steps 1 | tee "$out/bench_fp32.txt"
stamp "minidp bf16 sweep"
"${mpi[@]}" "$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list "auto,$caps" --grad-comm bf16 \
  --json "$out/bench_bf16.json" | tee "$out/bench_bf16.txt"
stamp "minidp bf16 sweep, row-sparse embedding gradient"
"${mpi[@]}" "$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list "auto,$caps" --grad-comm bf16 \
  --sparse-embedding-grad --json "$out/bench_bf16_sparse.json" | tee "$out/bench_bf16_sparse.txt"
for gather in end overlap; do
  stamp "minidp ZeRO-1, gather $gather"
  "${mpi[@]}" "$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list "${caps##*,}" --zero 1 \
    --zero-gather "$gather" --json "$out/bench_zero_$gather.json" | tee "$out/bench_zero_$gather.txt"
done
for precision in fp32 bf16; do
  stamp "PyTorch DDP $precision"
  "${mpi[@]}" "$python" train/torch_bench.py "${torch[@]}" --bucket-mb ${caps//,/ } --grad-comm "$precision" \
    --json "$out/torch_$precision.json" | tee "$out/torch_$precision.txt"
done
stamp "weak scaling: one GPU"
"$build/bin/minidp-bench" "${gpt[@]}" "${bench[@]}" --bucket-mb-list 25 --json "$out/weak_np1.json" \
  | tee "$out/weak_np1.txt"
stamp "trace picture"
"$python" train/plot_bench.py --trace "$out/trace_fp32.json" --match "bucket auto MB, overlap on" \
  -o "$out/timeline_$link.png" || true
stamp "done"
"$python" train/dp_summary.py "$out" --link "$link" | tee "$out/summary.md"
