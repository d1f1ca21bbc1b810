#!/usr/bin/env python3
"""Resume end to end: 10 steps (saving every 4), then --resume to 20, gives a file byte-identical to 20 steps
straight, on 1 and 2 ranks, for SGD and AdamW, MLP and GPT, and with --zero 1 on 2 and 3 ranks (its state
shards gathered into the file, scattered on resume), and with --comm-hook powersgd on 2 and 3 ranks (its error
feedback, Q matrices and step in the file); a state saved on 2 ranks continues on 1 rank (twice the
--batch-size) through the same global batches, ending near the 2-rank run; a ZeRO-1 state continues without
ZeRO on another rank count and a plain state with ZeRO, both near the uninterrupted run; fp64 saves F64.

Usage: resume.py MPIEXEC MINIDP_TRAIN
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

mpiexec, train = sys.argv[1:3]
MLP = ["--model", "mlp", "--hidden", "32", "--batch-size", "8"]
GPT = ["--model", "gpt", "--layers", "1", "--heads", "2", "--embd", "16", "--context", "16", "--batch-size", "4",
       "--eval-batches", "1"]
# Small buckets: ZeRO-1's shards cut across parameters and buckets.
SMALL_BUCKETS = ["--bucket-mb", "0.005", "--first-bucket-mb", "0.002"]


def run(ranks, args):
    command = ([mpiexec, "-np", str(ranks), "--oversubscribe"] if ranks > 1 else []) + [train, "--log-every", "5", *args]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def tensors(path):
    """name -> (dtype, array) and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        dtype = {"F32": np.float32, "F64": np.float64}[e["dtype"]]
        out[name] = (e["dtype"], np.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtype))
    return out, meta


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def resumes_identically(ranks, base, label, folder):
    """20 steps straight against 10 steps (saving every 4) + --resume to 20: byte-identical files."""
    p = lambda name: os.path.join(folder, name)
    run(ranks, base + ["--steps", "20", "--save", p("full")])
    run(ranks, base + ["--steps", "10", "--save-every", "4", "--save", p("half")])
    run(ranks, base + ["--steps", "20", "--resume", p("half"), "--save", p("resumed")])
    ok = same_bytes(p("full"), p("resumed"))
    print(f"{label} {ranks} rank(s): 10 + resume + 10 {'==' if ok else '!='} 20")
    return ok


def worst_difference(a, b):
    """The largest difference of a tensor of file `a` from file `b`'s, relative to b's largest magnitude;
    infinite when the two files hold other names."""
    ta, tb = tensors(a)[0], tensors(b)[0]
    if set(ta) != set(tb):
        return float("inf")
    return max(float(np.max(np.abs(ta[k][1] - tb[k][1]))) / max(float(np.max(np.abs(tb[k][1]))), 1e-30) for k in tb)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        p = lambda name: os.path.join(d, name)
        cases = [(f"{model} {optimizer}", ranks, args + ["--optimizer", optimizer])
                 for model, args in (("mlp", MLP), ("gpt", GPT)) for optimizer in ("sgd", "adamw") for ranks in (1, 2)]
        # ZeRO-1: each rank holds a shard of the optimizer state; the file holds it whole.
        cases += [(f"gpt {optimizer} --zero 1", ranks, GPT + SMALL_BUCKETS + ["--optimizer", optimizer, "--zero", "1"])
                  for optimizer in ("sgd", "adamw") for ranks in (2, 3)]
        # PowerSGD's state (error feedback per rank, warm-start Q, its step count) in the file, past its start.
        cases += [("gpt adamw --comm-hook powersgd", ranks, GPT + SMALL_BUCKETS + [
            "--optimizer", "adamw", "--comm-hook", "powersgd", "--powersgd-rank", "2", "--powersgd-start-iter", "3"])
            for ranks in (2, 3)]
        for label, ranks, base in cases:
            if not resumes_identically(ranks, base, label, d):
                failures.append(f"{label} np{ranks}")
        # Between ZeRO-1 and plain DDP: the uninterrupted run is plain DDP; parameters and optimizer state end
        # near it. SGD also moves between 3 ranks of 4 rows and 2 of 6 (the same global batches); AdamW stays on
        # 3 ranks: its normalised steps turn the rounding of another summation order in near-zero gradients
        # into relative differences near 1e-4 within 20 steps.
        three = GPT + SMALL_BUCKETS
        two = [a if a != "4" else "6" for a in three]
        for optimizer, plain_ranks, plain in (("sgd", 2, two), ("adamw", 3, three)):
            zero = three + ["--optimizer", optimizer, "--zero", "1"]
            plain = plain + ["--optimizer", optimizer]
            run(plain_ranks, plain + ["--steps", "20", "--save", p("plain20")])
            run(3, zero + ["--steps", "10", "--save", p("zero10")])
            run(plain_ranks, plain + ["--steps", "20", "--resume", p("zero10"), "--save", p("from_zero")])
            run(plain_ranks, plain + ["--steps", "10", "--save", p("plain10")])
            run(3, zero + ["--steps", "20", "--resume", p("plain10"), "--save", p("to_zero")])
            for name, what in (("from_zero", f"--zero 1 on 3 ranks -> plain on {plain_ranks}"),
                               ("to_zero", f"plain on {plain_ranks} ranks -> --zero 1 on 3")):
                worst = worst_difference(p(name), p("plain20"))
                print(f"gpt {optimizer} {what}: largest relative difference from the uninterrupted run {worst:.2e}")
                if not worst < 1e-5:
                    failures.append(f"{optimizer} {name}")
        # CUDA (one GPU per rank): the same promise; skipped where no GPU is visible.
        probe = subprocess.run([train, *MLP, "--steps", "1", "--device", "cuda"], capture_output=True, text=True)
        if probe.returncode == 0:
            gpus = int(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU "))
            for ranks, extra in [(r, e) for r, e in ((1, []), (2, []), (2, ["--zero", "1"])) if r <= gpus]:
                label = " ".join(["cuda mlp adamw"] + extra)
                if not resumes_identically(ranks, MLP + ["--optimizer", "adamw", "--device", "cuda"] + extra, label, d):
                    failures.append(f"{label} np{ranks}")
        else:
            print("cuda: skipped (no CUDA device)")
        # Another rank count: the global batch stays 16 rows, drawn in the same order.
        run(2, MLP + ["--steps", "10", "--save", p("half2")])
        run(2, MLP + ["--steps", "20", "--save", p("full2")])
        one = [a if a != "8" else "16" for a in MLP]
        run(1, one + ["--steps", "20", "--resume", p("half2"), "--save", p("resumed1")])
        full, _ = tensors(p("full2"))
        resumed, meta = tensors(p("resumed1"))
        worst = max(float(np.max(np.abs(full[k][1] - resumed[k][1]))) for k in full if not k.startswith("optimizer."))
        # Only the summation order of the gradient average differs: float32 rounding, not other batches.
        print(f"2 ranks -> resume on 1 rank: largest parameter difference {worst:.2e}")
        if not worst < 1e-4:
            failures.append("rank count change")
        if json.loads(meta["minidp"])["step"] != 20:
            failures.append("metadata step")
        # fp64 runs save F64 (parameters and optimizer state); PyTorch names stay.
        run(1, MLP + ["--steps", "2", "--dtype", "fp64", "--save", p("fp64")])
        dtypes = {name: t[0] for name, t in tensors(p("fp64"))[0].items()}
        print(f"fp64 run saves {sorted(set(dtypes.values()))}")
        if set(dtypes.values()) != {"F64"} or "layers.0.weight" not in dtypes:
            failures.append("fp64 dtype")
        # A PowerSGD state continues only under the same hook and settings: other ones are refused, in one line.
        psgd = GPT + ["--comm-hook", "powersgd", "--powersgd-rank", "2", "--powersgd-start-iter", "3"]
        run(1, psgd + ["--steps", "6", "--save", p("psgd")])
        for other in (["--comm-hook", "allreduce"], ["--comm-hook", "powersgd", "--powersgd-rank", "4"]):
            refused = subprocess.run([train, *GPT, "--steps", "8", "--resume", p("psgd"), *other],
                                     capture_output=True, text=True)
            said = refused.stderr.strip()
            print(f"resume of a powersgd state with {' '.join(other)}: exit {refused.returncode}: {said}")
            if refused.returncode == 0 or "comm_hook" not in said or len(said.splitlines()) != 1:
                failures.append("comm hook change on resume")
    print("FAILED: " + ", ".join(failures) if failures else "all resume checks pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
