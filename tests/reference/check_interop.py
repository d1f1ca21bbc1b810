"""Check safetensors interop between minidp (C++) and PyTorch.

Check mode: load a file written by minidp with safetensors.torch.load_file and
verify tensor names, shapes, dtype float32 and finite values against a spec.
The spec is a JSON file {"name": [d0, d1, ...], ...}, and/or `--expect
name:d0xd1 ...`, and/or `--model mlp:12,16,5` / `--model gpt:V,T,L,H,C`
(the parameter list of tests/reference/models.py). Exit code 0 = OK, 1 = mismatch.

    python3 tests/reference/check_interop.py out/mlp.safetensors --model mlp:12,16,5
    python3 tests/reference/check_interop.py ckpt.safetensors --spec spec.json --allow-extra

Write mode: write a torch-made MLP [12,16,5] state_dict (fixed seed, float32)
for the C++ side to load:

    python3 tests/reference/check_interop.py --write /tmp/torch_mlp.safetensors
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import GPT, MLP, expected_param_specs  # noqa: E402


def model_spec(text):
    kind, _, nums = text.partition(":")
    nums = [int(n) for n in nums.split(",")]
    model = MLP(nums) if kind == "mlp" else GPT(*nums) if kind == "gpt" else None
    if model is None:
        raise SystemExit(f"unknown model kind {kind!r} (want mlp or gpt)")
    return dict(expected_param_specs(model))


def check(path, spec, allow_extra):
    try:
        tensors = load_file(path)
    except Exception as e:  # noqa: BLE001 - any load failure is a check failure
        return [f"cannot load {path}: {e}"]
    errors = []
    for name, shape in spec.items():
        t = tensors.get(name)
        if t is None:
            errors.append(f"missing tensor {name}")
            continue
        if tuple(t.shape) != tuple(shape):
            errors.append(f"{name}: shape {tuple(t.shape)} != expected {tuple(shape)}")
        if t.dtype != torch.float32:
            errors.append(f"{name}: dtype {t.dtype} != torch.float32")
        elif not torch.isfinite(t).all():
            errors.append(f"{name}: {int((~torch.isfinite(t)).sum())} non-finite values")
    if not allow_extra:
        errors += [f"unexpected tensor {n}" for n in sorted(set(tensors) - set(spec))]
    return errors


def main():
    ap = argparse.ArgumentParser(description="minidp <-> PyTorch safetensors interop check")
    ap.add_argument("path", nargs="?", help="safetensors file written by minidp")
    ap.add_argument("--spec", help="JSON file {name: shape}")
    ap.add_argument("--expect", nargs="*", default=[], help="name:d0xd1 entries")
    ap.add_argument("--model", help="mlp:12,16,5 or gpt:V,T,L,H,C")
    ap.add_argument("--allow-extra", action="store_true", help="ignore tensors not in the spec")
    ap.add_argument("--write", metavar="PATH", help="write a torch MLP [12,16,5] state_dict and exit")
    args = ap.parse_args()

    if args.write:
        torch.manual_seed(0)
        sd = {k: v.contiguous() for k, v in MLP([12, 16, 5]).state_dict().items()}
        save_file(sd, args.write, metadata={"writer": f"pytorch {torch.__version__}"})
        print(f"wrote {args.write}: " + ", ".join(f"{k}{list(v.shape)}" for k, v in sd.items()))
        return 0

    if not args.path:
        ap.error("need a path to check (or --write PATH)")
    spec = {}
    if args.spec:
        with open(args.spec) as f:
            spec.update(json.load(f))
    for item in args.expect:
        name, _, dims = item.rpartition(":")
        spec[name] = [int(d) for d in dims.split("x")] if dims else []
    if args.model:
        spec.update(model_spec(args.model))
    if not spec:
        ap.error("empty spec: give --spec, --expect or --model")

    errors = check(args.path, spec, args.allow_extra)
    if errors:
        print(f"FAIL {args.path}: {len(errors)} problem(s)")
        for e in errors:
            print("  " + e)
        return 1
    print(f"OK {args.path}: {len(spec)} tensors match (float32, finite)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
