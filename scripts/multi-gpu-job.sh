#!/usr/bin/env bash
# The multi-GPU job (issue 6), one per machine kind: every figure docs/benchmarks.md needs from a host
# with N GPUs, in one run. Usage: scripts/multi-gpu-job.sh OUTDIR [BUILD_DIR]
#   - nvidia-smi topo -m; the data-parallel tests with NCCL on every GPU (mpirun -np N);
#   - raw all-reduce bandwidth at bucket sizes (minidp-bench-allreduce);
#   - minidp-bench for the MLP and GPT: overlap off/on, bucket sizes swept, NCCL max CTAs swept;
#   - train/torch_bench.py under DDP on the same GPUs, same shapes, batch, bucket caps, fp32;
#   - weak scaling: the same per-GPU batch on 1, 2, 4, ... N GPUs.
set -euo pipefail
out=${1:?usage: multi-gpu-job.sh OUTDIR [BUILD_DIR]}
build=${2:-build}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
n=$(nvidia-smi -L | grep -c '^GPU')
mpi=(mpirun -np "$n" --oversubscribe --bind-to none)
gpt=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --batch-size 8)
mlp=(--model mlp --hidden 4096 4096 4096 --batch-size 256)
python=${PYTHON:-python3}

nvidia-smi topo -m | tee "$out/topo.txt"
"${mpi[@]}" "$build/tests/test_ddp" 2>&1 | tee "$out/test_ddp_np$n.log" | tail -3
"${mpi[@]}" "$build/bin/minidp-bench-allreduce" --device cuda --sizes-mb 1 5 25 100 --json "$out/allreduce.json" | tee "$out/allreduce.txt"
for model in gpt mlp; do
  if [ "$model" = gpt ]; then args=("${gpt[@]}"); else args=("${mlp[@]}"); fi
  "${mpi[@]}" "$build/bin/minidp-bench" "${args[@]}" --device cuda --steps 30 --warmup 5 --repeats 2 \
    --bucket-mb-list 1,5,25,100 --json "$out/bench_$model.json" --trace "$out/trace_$model.json" | tee "$out/bench_$model.txt"
  "${mpi[@]}" "$build/bin/minidp-bench" "${args[@]}" --device cuda --steps 30 --warmup 5 --repeats 1 \
    --bucket-mb-list 25 --nccl-max-ctas-list 2,8,32 --json "$out/bench_${model}_ctas.json" | tee "$out/bench_${model}_ctas.txt"
done
"${mpi[@]}" "$python" train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 256 \
  --batch-size 8 --bucket-mb 1 5 25 100 --steps 30 --warmup 5 --device cuda --json "$out/torch_gpt.json" | tee "$out/torch_gpt.txt"
"${mpi[@]}" "$python" train/torch_bench.py --model mlp --dims 784,4096,4096,4096,10 --batch-size 256 \
  --bucket-mb 1 5 25 100 --steps 30 --warmup 5 --device cuda --json "$out/torch_mlp.json" | tee "$out/torch_mlp.txt"
for k in 1 2 4 8; do
  [ "$k" -le "$n" ] || break
  mpirun -np "$k" --oversubscribe --bind-to none "$build/bin/minidp-bench" "${gpt[@]}" --device cuda --steps 30 \
    --warmup 5 --repeats 1 --bucket-mb-list 25 --json "$out/weak_gpt_np$k.json" | tee "$out/weak_gpt_np$k.txt"
done
