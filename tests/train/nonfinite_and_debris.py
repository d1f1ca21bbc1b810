#!/usr/bin/env python3
"""Non-finite steps and debris, alone and under mpirun -np 2:
- a diverging run with --save-every 1 logged every 1000 steps stops at the first non-finite step with exit 1 and
  one line naming it, and the state file holds the step before it, every tensor finite;
- the same run with --skip-nonfinite ends (exit 0), its log and metrics name the skipped steps and the non-finite
  values (null in JSON, listed under "nonfinite"), and the saved parameters are finite; so does a GPT under
  --zero 3 (a skipped step frees the gathered units as an update does);
- temporaries "<file>.tmp.<host>.<pid>.<n>" of a writer that is gone are removed by the next run that resumes from
  that file (without --save) or starts in that folder; a live writer's and another host's are kept.

Usage: nonfinite_and_debris.py MPIEXEC MINIDP_TRAIN
"""
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile

import numpy as np

from job_tools import MPIRUN_EXIT_REPORT

mpiexec, train = sys.argv[1:3]
DIVERGING = ["--steps", "30", "--hidden", "16", "--batch-size", "8", "--lr", "1e6", "--weight-decay", "1e6",
             "--log-every", "1000", "--eval-batches", "1"]
QUICK = ["--hidden", "16", "--batch-size", "8", "--eval-batches", "1"]


def launch(ranks, args):
    return ([mpiexec, "-np", str(ranks), "--oversubscribe"] if ranks > 1 else []) + [train, *args]


def run(command, cwd):
    job = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    lines = [l for l in job.stderr.splitlines() if l.strip() and not MPIRUN_EXIT_REPORT.search(l)]
    return job.returncode, lines, job.stdout


def state(path):
    """(metadata of minidp, name -> float array) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = json.loads(header.pop("__metadata__")["minidp"])
    arrays = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        arrays[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype={"F32": np.float32, "F64": np.float64}[e["dtype"]])
    return meta, arrays


def check(problems, label, ok, what):
    print(f"{label}: {what}: {'ok' if ok else 'FAIL'}")
    if not ok:
        problems.append(f"{label}: {what}")


def nonfinite_cases(problems, folder, ranks):
    label = f"{ranks} rank(s)"
    save = os.path.join(folder, "state.safetensors")
    code, lines, _ = run(launch(ranks, DIVERGING + ["--save-every", "1", "--save", save]), folder)
    check(problems, label, code == 1 and len(lines) == 1 and "the loss is" in lines[0],
          f"a diverging run stops with one line naming the step (exit {code}, {lines})")
    stopped = int(lines[0].split("step ", 1)[1].split(":")[0]) if len(lines) == 1 and "step " in lines[0] else -1
    meta, arrays = state(save)
    check(problems, label, meta["step"] == stopped - 1 and all(np.isfinite(a).all() for a in arrays.values()),
          f"the state holds step {meta['step']}, the one before step {stopped}, every tensor finite")
    os.remove(save)
    metrics = os.path.join(folder, "metrics.jsonl")
    code, lines, out = run(launch(ranks, DIVERGING[:-4] + ["--log-every", "5", "--eval-batches", "1", "--skip-nonfinite",
                                                           "--metrics", metrics, "--save", save]), folder)
    with open(metrics) as f:
        points = [json.loads(line) for line in f]
    last = points[-1]
    check(problems, label, code == 0 and last["skipped_steps"] > 0 and "grad_norm" in last["nonfinite"]
          and last["grad_norm"] is None and "skipped" in out,
          f"--skip-nonfinite ends and names the skipped steps ({last})")
    meta, arrays = state(save)
    check(problems, label, all(np.isfinite(a).all() for a in arrays.values()) and meta["optimizer_steps"] < 30,
          f"--skip-nonfinite saves finite parameters after {meta['optimizer_steps']} updates of 30 steps")
    os.remove(save)
    os.remove(metrics)


def zero3_skip_cases(problems, folder, ranks):
    """--skip-nonfinite under --zero 3 (a GPT of two blocks: three units): a skipped step frees the gathered units
    as an update would, so the next forward and backward gather them again; the run ends with exit 0."""
    label = f"{ranks} rank(s), --zero 3"
    gpt = ["--model", "gpt", "--data", "fortunes", "--layers", "2", "--heads", "2", "--embd", "16", "--context", "16",
           "--batch-size", "2", "--eval-batches", "1", "--steps", "20", "--lr", "1e6", "--weight-decay", "1e6",
           "--log-every", "5", "--zero", "3", "--skip-nonfinite"]
    code, lines, out = run(launch(ranks, gpt), folder)
    check(problems, label, code == 0 and "skipped" in out,
          f"--skip-nonfinite skips steps and ends (exit {code}, {lines[-1:] if lines else 'no error'})")


def debris_cases(problems, folder):
    host = socket.gethostname()
    gone = subprocess.Popen(["true"])
    gone.wait()
    save = os.path.join(folder, "state.safetensors")
    subprocess.run([train, *QUICK, "--steps", "2", "--save", save], check=True, capture_output=True, cwd=folder)
    stray = {f"state.safetensors.tmp.{host}.{gone.pid}.0": False,   # a save killed midway: removed
             f"other.safetensors.tmp.{host}.{gone.pid}.3": False,   # another file's, in the folder the run starts in
             f"state.safetensors.tmp.{host}.{os.getpid()}.0": True,  # a live writer's: kept
             f"state.safetensors.tmp.elsewhere.{gone.pid}.0": True,  # another host's: kept
             "notes.tmp.txt": True}                                  # not a temporary
    for name in stray:
        with open(os.path.join(folder, name), "w") as f:
            f.write("partial")
    code, lines, _ = run([train, *QUICK, "--steps", "3", "--resume", save], folder)
    left = set(os.listdir(folder))
    check(problems, "debris", code == 0 and all((name in left) == kept for name, kept in stray.items()),
          f"a --resume run without --save removes the temporaries of writers that are gone, keeps the rest "
          f"(exit {code}, left {sorted(left)})")


def main():
    problems = []
    folder = tempfile.mkdtemp()
    try:
        for ranks in (1, 2):
            nonfinite_cases(problems, folder, ranks)
            zero3_skip_cases(problems, folder, ranks)
        debris_cases(problems, folder)
    finally:
        shutil.rmtree(folder)
    print("all passed" if not problems else f"{len(problems)} failed: {problems}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
