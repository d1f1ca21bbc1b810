#!/usr/bin/env python3
"""Exits 0 when two safetensors files hold the same parameter tensors byte for byte (names, dtypes, shapes,
data), ignoring the optimizer state ("optimizer." tensors) and the metadata. Usage: same_parameters.py A B"""
import json
import struct
import sys


def parameters(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    header.pop("__metadata__", None)
    return {name: (t["dtype"], t["shape"], data[t["data_offsets"][0]:t["data_offsets"][1]])
            for name, t in header.items() if not name.startswith("optimizer.")}


a, b = parameters(sys.argv[1]), parameters(sys.argv[2])
if a != b:
    differ = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
    sys.exit(f"{sys.argv[1]} and {sys.argv[2]} differ in {len(differ)} parameter(s), first {differ[0]}")
