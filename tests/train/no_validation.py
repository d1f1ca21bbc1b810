#!/usr/bin/env python3
"""--eval-batches 0 on a token model: no validation at all. Training runs, no step line and no summary carries a
validation loss (the JSON's val_loss is null, not 0), and the validation text is never cut into windows: an llm.c
validation file shorter than one window trains and saves. With validation batches, that file is refused before the
first step.

Usage: no_validation.py MINIDP_TRAIN
"""
import json
import os
import subprocess
import sys
import tempfile

train = sys.argv[1]
GPT = ["--model", "gpt", "--layers", "1", "--heads", "2", "--embd", "16", "--context", "8", "--batch-size", "4",
       "--steps", "3", "--log-every", "1"]


def token_file(path, count):
    """An llm.c token file of `count` tokens below 200."""
    with open(path, "wb") as f:
        f.write(b"".join(v.to_bytes(4, "little") for v in (20240520, 1, count)) + bytes(4 * 253)
                + b"".join((i % 200).to_bytes(2, "little") for i in range(count)))


def main():
    problems = []
    with tempfile.TemporaryDirectory() as root:
        token_file(os.path.join(root, "train.bin"), 4096)
        token_file(os.path.join(root, "short.bin"), 8)  # one short of a window of --context 8 and its target
        llmc = ["--data", "llmc", "--llmc-train", "train.bin", "--llmc-val", "short.bin"]
        runs = {"fortunes": GPT + ["--eval-batches", "0"],
                "llmc": GPT + llmc + ["--eval-batches", "0", "--save", "state.safetensors"],
                "llmc, validated": GPT + llmc + ["--eval-batches", "1"]}
        for name, args in runs.items():
            result = subprocess.run([train, *args], cwd=root, capture_output=True, text=True, timeout=120)
            out = result.stdout.splitlines()
            steps = [l for l in out if l.startswith("step ")]
            if name == "llmc, validated":
                if result.returncode != 1 or steps or "--llmc-val" not in result.stderr:
                    problems.append(f"{name}: exit {result.returncode}, {len(steps)} step(s), expected exit 1 naming "
                                    f"--llmc-val before the first step: {result.stderr.strip()}")
                continue
            if result.returncode != 0:
                problems.append(f"{name}: exit {result.returncode}: {result.stderr.strip()}")
                continue
            if len(steps) != 3 or any(" val " in l for l in steps):
                problems.append(f"{name}: step lines {steps}, expected 3 without a validation loss")
            if any(l.startswith("validation loss") for l in out):
                problems.append(f"{name}: a validation loss is printed")
            summary = json.loads(out[-1])
            if "val_loss" not in summary or summary["val_loss"] is not None:
                problems.append(f"{name}: the summary's val_loss is {summary.get('val_loss', 'missing')!r}, not null")
        if not os.path.isfile(os.path.join(root, "state.safetensors")):
            problems.append("llmc: --save wrote nothing")
    for p in problems:
        print("FAIL:", p)
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
