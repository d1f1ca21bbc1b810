#!/usr/bin/env python3
"""A comm hook's bar on the loss curve: the fortunes GPT trained with the hook stays within TOLERANCE of the
same run with the plain all-reduce. Trains the same small GPT (2 layers, width 64, context 64, batch 8 per
rank, AdamW, 400 steps) on N CPU ranks twice, --comm-hook allreduce and the hook's flags, logging the
training loss every 50 steps and the validation loss every 100, and compares every logged value (SCOPE
every) or the final validation loss (SCOPE final). The curves must also differ somewhere: identical curves
would mean the hook changed nothing. bf16 on the wire: every value within 1%; PowerSGD rank 4: the final
validation loss within 3%.

Usage: comm_hook_curve.py MPIEXEC MINIDP_TRAIN RANKS TOLERANCE SCOPE HOOK_FLAG...
"""
import json
import os
import subprocess
import sys
import tempfile

mpiexec, train, ranks, tolerance, scope = sys.argv[1:6]
hook = sys.argv[6:]
tolerance = float(tolerance)
assert scope in ("every", "final"), f"SCOPE is every or final, not {scope}"
ARGS = ["--model", "gpt", "--device", "cpu", "--data", "fortunes", "--layers", "2", "--heads", "4", "--embd", "64",
        "--context", "64", "--batch-size", "8", "--steps", "400", "--log-every", "50", "--eval-every", "100",
        "--eval-batches", "8", "--optimizer", "adamw"]
name = " ".join(hook)

with tempfile.TemporaryDirectory() as d:
    curves = []
    for k, flags in enumerate((["--comm-hook", "allreduce"], hook)):
        metrics = os.path.join(d, f"{k}.jsonl")
        subprocess.run([mpiexec, "-np", ranks, "--oversubscribe", train, *ARGS, *flags, "--metrics", metrics],
                       check=True, stdout=subprocess.DEVNULL)
        with open(metrics) as f:
            curves.append([json.loads(line) for line in f])

dense, hooked = curves
assert [r["step"] for r in dense] == [r["step"] for r in hooked], "the two runs logged different steps"
compared = [(a, b) for a, b in zip(dense, hooked)] if scope == "every" else [(dense[-1], hooked[-1])]
keys = ("loss", "val_loss") if scope == "every" else ("val_loss",)
worst, differs = (0.0, None), any(a.get("loss") != b.get("loss") for a, b in zip(dense, hooked))
for a, b in compared:
    for key in keys:
        if a.get(key) is None:
            continue
        relative = abs(b[key] - a[key]) / abs(a[key])
        if relative > worst[0]:
            worst = (relative, f"{key} at step {a['step']}: allreduce {a[key]:.5f}, {name} {b[key]:.5f}")
print(f"{ranks} ranks, {name}, {len(compared)} compared step(s): largest relative difference {worst[0]:.2e}"
      + (f" ({worst[1]})" if worst[1] else ""))
print(f"final: allreduce loss {dense[-1]['loss']:.4f} val {dense[-1]['val_loss']:.4f}; "
      f"{name} loss {hooked[-1]['loss']:.4f} val {hooked[-1]['val_loss']:.4f}")
if not differs:
    sys.exit(f"the curve with {name} is identical to the all-reduce's: the hook was not applied")
if worst[0] > tolerance:
    sys.exit(f"{name} moved the curve by more than {tolerance:.0%}")
