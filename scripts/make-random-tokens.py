#!/usr/bin/env python3
"""Writes llm.c token files of random GPT-2 token ids (vocabulary 50257) for speed measurements:
OUTDIR/train.bin (2^21 tokens) and OUTDIR/val.bin (2^16). Usage: make-random-tokens.py OUTDIR"""
import os
import random
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(0)
for name, count in (("train.bin", 1 << 21), ("val.bin", 1 << 16)):
    ids = [rng.randrange(50257) for _ in range(count)]
    ids[0] = 50256  # the largest id, so the reader sees the whole vocabulary
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
        f.write(struct.pack(f"<{count}H", *ids))
