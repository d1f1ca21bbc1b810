#!/usr/bin/env python3
"""Corrupted training states: every tensor kind minidp-train writes (a parameter, SGD's momentum, AdamW's two
moments, the same under ZeRO-1 on 2 ranks, PowerSGD's step, error feedback and Q, and stateless hooks) is
mutated in a copy of a real --save file (empty, one element short, another dtype, NaN, inf, an absurd step,
missing, an extra tensor beside it) and --resume must refuse it: exit status 1, exactly one line on stderr
that names the tensor, no signal death, the file byte-identical afterwards and nothing written beside it
(job_tools.expect_one_line). Each untouched state resumes.

Usage: corrupt_state.py MPIEXEC MINIDP_TRAIN [NAME_PART]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

from job_tools import expect_one_line, report, run_job, summary

mpiexec, train = sys.argv[1:3]
only = sys.argv[3] if len(sys.argv) > 3 else ""
MLP = ["--hidden", "16", "--batch-size", "8", "--eval-batches", "1", "--log-every", "1"]
GPT = ["--model", "gpt", "--layers", "1", "--heads", "2", "--embd", "16", "--context", "8", "--batch-size", "4",
       "--eval-batches", "1", "--log-every", "1"]
NUMPY = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "F16": np.float16}

# (label, ranks, flags, the tensor kinds mutated there, the mutations): each saved at 2 steps and resumed to 3.
# Every kind once in full alone; the 2-rank states (ZeRO-1's gathered shards, PowerSGD's per-rank error) and
# the hook under the rows wrapper with a few mutations each, to keep the suite short.
FEW = ("empty", "one column short", "NaN", "missing", "step 1e+300")
STATES = [
    ("sgd", 1, MLP, ("parameter", "optimizer"), None),
    ("adamw", 1, MLP + ["--optimizer", "adamw"], ("optimizer",), None),
    ("zero1 adamw", 2, MLP + ["--optimizer", "adamw", "--zero", "1"], ("optimizer exp_avg_sq",), FEW),
    ("powersgd", 1, MLP + ["--comm-hook", "powersgd", "--powersgd-start-iter", "1"], ("hook",), None),
    ("powersgd 2 ranks", 2, MLP + ["--comm-hook", "powersgd", "--powersgd-start-iter", "1"], ("hook",), FEW),
    ("bf16 hook", 1, MLP + ["--comm-hook", "bf16"], ("hook",), None),
    ("allreduce hook", 2, MLP, ("hook",), None),
    ("rows over powersgd", 1, GPT + ["--sparse-embedding-grad", "--comm-hook", "powersgd",
                                     "--powersgd-start-iter", "1"], ("hook powersgd.step",), FEW),
]


def read(path):
    """(header without metadata, metadata, name -> numpy array) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__")
    arrays = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        arrays[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=NUMPY[e["dtype"]]).reshape(e["shape"])
    return meta, arrays


def write(path, meta, arrays):
    header, blobs, offset = {"__metadata__": meta}, [], 0
    dtypes = {np.dtype(v): k for k, v in NUMPY.items()}
    for name, a in arrays.items():
        blob = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def with_value(a, value):
    b = np.array(a, copy=True)
    b.reshape(-1)[b.size // 2] = value
    return b


def mutations(name, a):
    """(what, the array or None to remove it, extra tensors to add) for tensor `name`."""
    out = [("empty", np.zeros([0], a.dtype), {}),
           ("one column short", a[..., :-1], {}),
           ("I32", a.astype(np.int32), {}),
           ("F16", a.astype(np.float16), {}),
           ("missing", None, {}),
           ("extra beside it", a, {name + "_extra": a})]
    if name.endswith(".step"):
        out += [(f"step {v:g}", np.array([v], a.dtype), {}) for v in (1e300, -5.0, 2.5, float("nan"), 3.0)]
    elif a.dtype.kind == "f":
        out += [("NaN", with_value(a, np.nan), {}), ("inf", with_value(a, np.inf), {})]
    return out


def kinds(arrays):
    """One tensor of each kind the file holds: a parameter's weight and bias, each optimizer state kind, each
    comm hook tensor kind."""
    picked = {}
    for name in arrays:
        if name.startswith("optimizer."):
            kind = "optimizer " + name.rsplit(".", 1)[1]
        elif name.startswith("comm_hook."):
            kind = "hook " + ".".join(name.split(".")[1:3])
        else:
            kind = "parameter " + name.rsplit(".", 1)[1]
        picked.setdefault(kind, name)
    return picked


def launch(ranks, args):
    command = [train, *args]
    if ranks > 1:
        command = [mpiexec, "-np", str(ranks), "--oversubscribe"] + command
    return command


def main():
    failures, count = [], 0
    root = tempfile.mkdtemp()
    try:
        for label, ranks, flags, mutated, chosen in STATES:
            if only and only not in label:
                continue
            state = os.path.join(root, label.replace(" ", "_") + ".safetensors")
            subprocess.run(launch(ranks, flags + ["--steps", "2", "--save", state]), check=True, capture_output=True,
                           cwd=root)
            meta, arrays = read(state)
            resume = lambda path: launch(ranks, flags + ["--steps", "3", "--resume", path])
            finished = run_job(resume(state), root)
            count += 1
            resumed = finished is not None and finished[0] == 0
            why = "no end within 120 s (killed)" if finished is None else finished[1].strip()
            print(f"{label}: the untouched state resumes: {'ok' if resumed else 'FAIL: ' + why}")
            if not resumed:
                failures.append(label)
            cases = [(kind, name, *m) for kind, name in kinds(arrays).items() if kind.startswith(mutated)
                     for m in mutations(name, arrays[name]) if chosen is None or m[0] in chosen]
            if not any(name.startswith("comm_hook.") for name in arrays):  # a stateless hook keeps nothing
                cases.append(("hook state", "comm_hook.junk", "extra", np.zeros([1], np.float32), {}))
            for kind, name, what, value, extra in cases:
                changed = dict(arrays)
                if name in changed:
                    changed.pop(name) if value is None else changed.__setitem__(name, value)
                else:
                    changed[name] = value
                changed.update(extra)
                path = os.path.join(root, "corrupt.safetensors")
                write(path, meta, changed)
                named = (list(extra) or [name])[0] if what.startswith("extra") else name
                problems, shown = expect_one_line(resume(path), root, 1, f"'{named}'", root, under_mpirun=ranks > 1)
                count += 1
                report(f"{label}: {kind} {what}", problems, shown, failures, 50)
                os.remove(path)
    finally:
        shutil.rmtree(root)
    return summary(count, failures)


if __name__ == "__main__":
    sys.exit(main())
