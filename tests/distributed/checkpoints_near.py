#!/usr/bin/env python3
"""Exits 0 when two safetensors files hold the same tensors (parameters and optimizer state: names, dtypes,
shapes) with each tensor of A within TOLERANCE of B's, relative to B's largest magnitude.
Usage: checkpoints_near.py A B TOLERANCE"""
import json
import struct
import sys

import numpy as np


def tensors(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    header.pop("__metadata__", None)
    dtypes = {"F32": np.float32, "F64": np.float64}
    return {name: (t["dtype"], t["shape"], np.frombuffer(data[t["data_offsets"][0]:t["data_offsets"][1]],
                                                         dtype=dtypes[t["dtype"]]).astype(np.float64))
            for name, t in header.items()}


a, b, tolerance = tensors(sys.argv[1]), tensors(sys.argv[2]), float(sys.argv[3])
if {n: t[:2] for n, t in a.items()} != {n: t[:2] for n, t in b.items()}:
    sys.exit(f"{sys.argv[1]} and {sys.argv[2]} hold other tensor names, dtypes or shapes")
error, name = max((float(np.max(np.abs(a[n][2] - b[n][2]))) / max(float(np.max(np.abs(b[n][2]))), 1e-30), n)
                  for n in b)
print(f"largest relative difference {error:.2e} ({name})")
if not error <= tolerance:
    sys.exit(f"{sys.argv[1]} differs from {sys.argv[2]} by {error:.2e} in {name} (tolerance {tolerance})")
