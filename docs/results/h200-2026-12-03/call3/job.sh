#!/usr/bin/env bash
# Call 3: HEAD (2eb1ee0, the working tree) against c720e46 (.gpu-src/base) at GPT-2 B16, alternated, then torch.compile.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/c3; mkdir -p $O
trap 'exit 124' TERM
trap 'cd $OUT && tar czf c3.tgz --exclude=tokens c3 && rm -rf c3' EXIT
deps=$PWD/.deps/root
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
( cd .gpu-src/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >$O/base_cmake.log 2>&1 && cmake --build build -j8 --target minidp-bench >$O/base_build.log 2>&1; echo "base build rc $?" ) &
mb=$!
if [ ! -x build/bin/minidp-bench ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMINIDP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$deps/usr" >$O/cmake.log 2>&1 && cmake --build build -j8 --target minidp-bench >$O/build.log 2>&1; echo "head build rc $?"
fi
wait $mb
el "built"
py=$(scripts/python.sh build)
$py scripts/make-random-tokens.py $O/tokens >/dev/null
gpt2=(--model gpt --layers 12 --heads 12 --embd 768 --context 1024 --data llmc --llmc-train $O/tokens/train.bin
      --llmc-val $O/tokens/val.bin --device cuda --optimizer adamw --dtype bf16 --steps 20 --warmup 5 --bucket-mb-list 25 --batch-size 16)
row() { grep -E '^ +high' $1 | awk '{print $5, $6, "peak", $(NF-1)}' | tr '\n' ' '; }
for r in 1 2 3; do
  for v in head base; do
    bin=build/bin/minidp-bench; [ $v = base ] && bin=.gpu-src/base/build/bin/minidp-bench
    $bin "${gpt2[@]}" --json $O/${v}_b16_$r.json >$O/${v}_b16_$r.txt 2>&1; echo "$v b16 r$r: $(row $O/${v}_b16_$r.txt)"
  done
done
el "minidp benches"
$py train/torch_bench.py --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --dtype bf16 \
  --compile on --attention sdpa --batch-size 16 --steps 20 --warmup 5 --device cuda --json $O/torch_gpt2_b16.json >$O/torch_gpt2_b16.txt 2>&1
echo "compile gpt B16:"; grep -E "ceiling|pytorch|rror" $O/torch_gpt2_b16.txt | tail -3
el "end"
