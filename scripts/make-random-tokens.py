#!/usr/bin/env python3
"""Writes llm.c token files of random token ids (vocabulary 50257, GPT-2's, or VOCAB) for speed measurements:
OUTDIR/train.bin (2^21 tokens) and OUTDIR/val.bin (2^16). Usage: make-random-tokens.py OUTDIR [VOCAB]"""
import os
import random
import struct
import sys

out = sys.argv[1]
vocab = int(sys.argv[2]) if len(sys.argv) > 2 else 50257
assert 2 <= vocab <= 65536, f"vocabulary {vocab}: llm.c files hold uint16 ids"
os.makedirs(out, exist_ok=True)
rng = random.Random(0)
for name, count in (("train.bin", 1 << 21), ("val.bin", 1 << 16)):
    ids = [rng.randrange(vocab) for _ in range(count)]
    ids[0] = vocab - 1  # the largest id, so the reader sees the whole vocabulary
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
        f.write(struct.pack(f"<{count}H", *ids))
