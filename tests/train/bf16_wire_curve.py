#!/usr/bin/env python3
"""The bar for --comm-hook bf16: the fortunes GPT's loss curve with bf16 gradients on the wire stays
within 1% of fp32 communication. Trains the same small GPT (2 layers, width 64, context 64, batch 8 per
rank, AdamW, 400 steps) on N CPU ranks twice, fp32 and bf16 on the wire, logging the training loss every 50
steps and the validation loss every 100, and compares every logged value. The curves must also differ
somewhere: identical curves would mean the flag changed nothing.

Usage: bf16_wire_curve.py MPIEXEC MINIDP_TRAIN [RANKS]
"""
import json
import os
import subprocess
import sys
import tempfile

mpiexec, train = sys.argv[1:3]
ranks = sys.argv[3] if len(sys.argv) > 3 else "2"
ARGS = ["--model", "gpt", "--device", "cpu", "--data", "fortunes", "--layers", "2", "--heads", "4", "--embd", "64",
        "--context", "64", "--batch-size", "8", "--steps", "400", "--log-every", "50", "--eval-every", "100",
        "--eval-batches", "8", "--optimizer", "adamw"]
TOLERANCE = 0.01
HOOKS = {"fp32": "allreduce", "bf16": "bf16"}

with tempfile.TemporaryDirectory() as d:
    curves = {}
    for wire in ("fp32", "bf16"):
        metrics = os.path.join(d, f"{wire}.jsonl")
        subprocess.run([mpiexec, "-np", ranks, "--oversubscribe", train, *ARGS, "--comm-hook", HOOKS[wire],
                        "--metrics", metrics], check=True, stdout=subprocess.DEVNULL)
        with open(metrics) as f:
            curves[wire] = [json.loads(line) for line in f]

fp32, bf16 = curves["fp32"], curves["bf16"]
assert [r["step"] for r in fp32] == [r["step"] for r in bf16], "the two runs logged different steps"
worst, differs = (0.0, None), False
for a, b in zip(fp32, bf16):
    for key in ("loss", "val_loss"):
        if a.get(key) is None:
            continue
        relative = abs(b[key] - a[key]) / abs(a[key])
        differs |= b[key] != a[key]
        if relative > worst[0]:
            worst = (relative, f"{key} at step {a['step']}: fp32 {a[key]:.5f}, bf16 {b[key]:.5f}")
print(f"{ranks} ranks, {len(fp32)} logged steps: largest relative difference {worst[0]:.2e}"
      + (f" ({worst[1]})" if worst[1] else ""))
print(f"final: fp32 loss {fp32[-1]['loss']:.4f} val {fp32[-1]['val_loss']:.4f}; "
      f"bf16 loss {bf16[-1]['loss']:.4f} val {bf16[-1]['val_loss']:.4f}")
if not differs:
    sys.exit("the bf16 run's curve is identical to fp32's: bf16 on the wire was not applied")
if worst[0] > TOLERANCE:
    sys.exit(f"bf16 on the wire moved the curve by more than {TOLERANCE:.0%}")
