#!/usr/bin/env bash
# --sparse-embedding-grad end to end: minidp-train's GPT under mpirun -np N with wte.weight's rows
# all-gathered. Overlap on and off write byte-identical checkpoints; against dense DDP the checkpoint is
# byte-identical with 2 ranks and fp32 on the wire (a + b = b + a, and both halve the sum exactly), and
# otherwise within TOL (default 1e-5; 5e-3 with --comm-hook bf16): the rows are added in rank order, in
# fp32, where the dense all-reduce sums in its own order (and in bf16 with bf16 on the wire).
# N x 2 micro-batches x 2 x 16 ids are below the vocabulary: the sparse path, not the fallback.
# Usage: MINIDP_PYTHON=... sparse_identical.sh MPIEXEC MINIDP_TRAIN N [FLAG...] (ctest sets MINIDP_PYTHON, the
# build's interpreter; scripts/python.sh prints it)
set -euo pipefail
mpiexec=$1 train=$2 ranks=$3
python=${MINIDP_PYTHON:?MINIDP_PYTHON must name the Python interpreter with numpy (scripts/python.sh prints it)}
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--model gpt --device cpu --data fortunes --steps 10 --log-every 10 --batch-size 2 --context 16 --grad-accum 2
      --layers 2 --heads 2 --embd 32 --bucket-mb 0.02 --first-bucket-mb 0.005 --optimizer adamw "$@")
tol=1e-5
[[ " $* " == *" bf16 "* ]] && tol=5e-3
run() {
  "$mpiexec" -np "$ranks" --oversubscribe "$train" "${args[@]}" --save "$dir/$1.safetensors" "${@:2}" > "$dir/$1.log"
}
run on --sparse-embedding-grad --overlap on
run off --sparse-embedding-grad --overlap off
run dense
grep -q "wte.weight's rows all-gathered" "$dir/on.log" || { echo "the sparse path was not set up:"; cat "$dir/on.log"; exit 1; }
cmp "$dir/on.safetensors" "$dir/off.safetensors"
if [ "$ranks" = 2 ] && [ "$tol" = 1e-5 ]; then
  cmp "$dir/on.safetensors" "$dir/dense.safetensors"
  echo "identical to dense DDP: $(sha256sum < "$dir/on.safetensors")"
  exit 0
fi
"$python" - "$dir/on.safetensors" "$dir/dense.safetensors" "$tol" <<'PY'
import json, struct, sys
import numpy as np

def load(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", f"{name}: {t['dtype']}"
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + begin:8 + n + end], dtype=np.float32)
    return out

sparse, dense, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
assert sparse.keys() == dense.keys(), "the checkpoints name different tensors"
worst = max((float(np.abs(sparse[k] - dense[k]).max()), k) for k in sparse)
print(f"sparse vs dense DDP: largest difference {worst[0]:.3g} ({worst[1]}), tolerance {tol}")
sys.exit(0 if worst[0] <= tol else 1)
PY
