#!/usr/bin/env python3
"""fp64 is fp64: a --dtype fp64 run started with --load from float64 weights keeps their bits (a step of
lr 1e-300 moves no weight, so the saved file equals the loaded one bit for bit); two SGD steps (momentum 0.9,
weight decay 0.1) on a GPT match PyTorch's float64 replay from the same weights and batches within 1e-12 in
every parameter. The weights are drawn in float64 (no float32 holds them), so a load that rounds through
float32 is off by about 1e-9. A --dtype fp32 run of the same file says that it rounds them.

The data is an llm.c token file holding exactly one window (context + 1 tokens) and the batch one row (a step
may not take more tokens than the text holds): every batch is that window, so the replay knows the batches
without the sampler.

Usage: fp64_replay.py MINIDP_TRAIN
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from models import GPT  # noqa: E402

train = sys.argv[1]
VOCAB, CONTEXT, LAYERS, HEADS, EMBD, ROWS, STEPS = 32, 8, 1, 2, 16, 1, 2
LR, WEIGHT_DECAY, TOLERANCE = 0.05, 0.1, 1e-12


def write_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def write_f64(path, tensors):
    """A safetensors file of float64 tensors under their names."""
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        blob = t.detach().contiguous().numpy().astype("<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_f64(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        assert e["dtype"] == "F64", (name, e["dtype"])
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype="<f8").reshape(e["shape"])
    return out


def main():
    torch.manual_seed(5)
    model = GPT(VOCAB, CONTEXT, LAYERS, HEADS, EMBD).double()
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, dtype=torch.float64) * 0.05)  # every bias and LayerNorm weight moves too
    start = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    tokens = torch.randint(0, VOCAB, (CONTEXT + 1,))
    tokens[3] = VOCAB - 1  # the files' largest token sets the vocabulary
    with tempfile.TemporaryDirectory() as d:
        weights, data, out = (os.path.join(d, n) for n in ("weights.safetensors", "tokens.bin", "out.safetensors"))
        write_f64(weights, dict(model.named_parameters()))
        write_tokens(data, tokens.tolist())
        command = [train, "--model", "gpt", "--data", "llmc", "--llmc-train", data, "--llmc-val", data,
                   "--layers", str(LAYERS), "--heads", str(HEADS), "--embd", str(EMBD), "--context", str(CONTEXT),
                   "--batch-size", str(ROWS), "--load", weights, "--optimizer", "sgd", "--weight-decay",
                   str(WEIGHT_DECAY), "--eval-batches", "1", "--log-every", "1", "--save", out]
        fp64 = ["--dtype", "fp64", "--steps", str(STEPS), "--lr", str(LR)]
        runs = {}
        for name, args in (("replay", fp64), ("still", ["--dtype", "fp64", "--steps", "1", "--lr", "1e-300"]),
                           ("fp32", fp64[2:] + ["--dtype", "fp32"])):
            runs[name] = subprocess.run(command + args, capture_output=True, text=True)
            if runs[name].returncode != 0 and name != "fp32":
                print(f"FAILED: minidp-train {name} exited {runs[name].returncode}: {runs[name].stderr.strip()}")
                return 1
            if name == "replay":
                minidp = read_f64(out)
            if name == "still":
                kept = read_f64(out)
    failures = []
    changed = [n for n in start if kept[n].tobytes() != start[n].tobytes()]
    print(f"--dtype fp64 --load of F64 weights: {len(start) - len(changed)} of {len(start)} parameters keep their bits")
    if changed:
        failures.append(f"--load changed the bits of {changed}")
    said = [line for line in runs["fp32"].stdout.splitlines() if "rounded to float32" in line]
    print(f"--dtype fp32 --load of F64 weights says: {said}")
    if runs["fp32"].returncode != 0 or len(said) != 1 or weights not in said[0]:
        failures.append("an fp32 run does not say that it rounds the F64 weights")
    # The replay: the same window in every batch.
    x = tokens[:CONTEXT].repeat(ROWS, 1)
    y = tokens[1:].repeat(ROWS, 1)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=WEIGHT_DECAY)
    for _ in range(STEPS):
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
    worst, where = 0.0, ""
    for name, p in model.named_parameters():
        diff = float(np.max(np.abs(minidp[name] - p.detach().numpy())))
        if diff > worst:
            worst, where = diff, name
    moved = max(float(np.max(np.abs(minidp[n] - start[n]))) for n in start)
    print(f"fp64 GPT, {STEPS} SGD steps from float64 weights: largest difference from PyTorch {worst:.3g} ({where})")
    if not worst <= TOLERANCE or not moved > 1e-3:
        failures.append(f"the replay differs by more than {TOLERANCE:g}, or the steps moved nothing ({moved:.3g})")
    print("FAILED: " + "; ".join(failures) if failures else "fp64 keeps its bits and matches PyTorch")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
