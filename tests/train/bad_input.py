#!/usr/bin/env python3
"""Bad input, as a new user would type it, against the built programs: every case must end with the
expected exit status (2: usage, 1: runtime), exactly one line on stderr (one minidp line under mpirun, and
no MPI_ABORT banner) that names the flag or file, no source path, and no file left behind.

Usage: bad_input.py MPIEXEC MINIDP_TRAIN MINIDP_BENCH
"""
import os
import shutil
import subprocess
import sys
import tempfile

mpiexec, train, bench = sys.argv[1:4]
QUICK = ["--steps", "2", "--hidden", "16", "--batch-size", "8", "--eval-batches", "1"]
GPT = ["--model", "gpt", "--layers", "1", "--heads", "2", "--embd", "16", "--steps", "2", "--batch-size", "8",
       "--eval-batches", "1"]


def fixtures(root):
    """Folders and files the cases point at, outside the run folder."""
    paths = {"root": root}
    paths["empty"] = os.path.join(root, "empty")
    os.mkdir(paths["empty"])
    paths["junk"] = os.path.join(root, "junk")  # a folder of unrelated files (like /tmp)
    os.mkdir(paths["junk"])
    with open(os.path.join(paths["junk"], "notes"), "w") as f:
        f.write("unrelated text " * 100)
    # A fortune folder whose text is long enough to train on, too short to validate (10% of 400 bytes).
    paths["short"] = os.path.join(root, "short")
    os.mkdir(paths["short"])
    with open(os.path.join(paths["short"], "tiny"), "w") as f:
        f.write(("a fortune. " * 40)[:400])
    open(os.path.join(paths["short"], "tiny.dat"), "w").close()
    paths["notst"] = os.path.join(root, "not.safetensors")
    with open(paths["notst"], "w") as f:
        f.write("this is not a safetensors file")
    # A checkpoint of parameters only (what --save wrote before training states existed): 8-byte length,
    # JSON header, data.
    header = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    paths["weights"] = os.path.join(root, "weights.safetensors")
    with open(paths["weights"], "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + b"\0\0\0\0")
    # A real training state of a 16-wide MLP after 2 steps.
    paths["state"] = os.path.join(root, "state.safetensors")
    subprocess.run([train, *QUICK, "--save", paths["state"]], check=True, capture_output=True, cwd=root)
    return paths


def cases(p):
    t, b = [train], [bench]
    mpi2 = [mpiexec, "-np", "2", "--oversubscribe", train]
    return [
        # (name, command, exit status, text the line must contain[, environment])
        ("negative lr", t + ["--lr", "-1"], 2, "--lr"),
        ("nan lr", t + ["--lr", "nan"], 2, "--lr"),
        ("inf lr", t + ["--lr", "inf"], 2, "--lr"),
        ("zero lr", t + ["--lr", "0"], 2, "--lr"),
        ("text lr", t + ["--lr", "fast"], 2, "--lr"),
        ("negative weight decay", t + ["--weight-decay", "-5"], 2, "--weight-decay"),
        ("negative eval batches", t + ["--eval-batches", "-1"], 2, "--eval-batches"),
        ("negative sample", t + ["--sample", "-5"], 2, "--sample"),
        ("negative watchdog", t + ["--watchdog-s", "-1"], 2, "--watchdog-s"),
        ("zero watchdog", t + ["--watchdog-s", "0"], 2, "--watchdog-s"),
        ("huge steps", t + ["--steps", "99999999999999999999"], 2, "--steps"),
        ("negative steps", t + ["--steps", "-1"], 2, "--steps"),
        ("huge grad-accum", t + ["--grad-accum", "100000000"], 2, "--grad-accum"),
        ("zero grad-accum", t + ["--grad-accum", "0"], 2, "--grad-accum"),
        ("zero batch", t + ["--batch-size", "0"], 2, "--batch-size"),
        ("fractional batch", t + ["--batch-size", "2.5"], 2, "--batch-size"),
        ("zero log-every", t + ["--log-every", "0"], 2, "--log-every"),
        ("zero hidden", t + ["--hidden", "0"], 2, "--hidden"),
        ("negative save-every", t + ["--save-every", "-3"], 2, "--save-every"),
        ("unknown model", t + ["--model", "resnet"], 2, "--model"),
        ("unknown dtype", t + ["--dtype", "fp16"], 2, "--dtype"),
        ("unknown flag", t + ["--learning-rate", "1"], 2, "--learning-rate"),
        # Each model brings its own flags: another model's is refused, naming the model it belongs to.
        ("flag of another model", t + GPT + ["--kv-heads", "2"], 2, "--kv-heads is a flag of --model llama"),
        ("mlp flag on the gpt", t + GPT + ["--hidden", "16"], 2, "--hidden is a flag of --model llama or mlp"),
        ("zero heads", t + ["--model", "llama", "--heads", "0"], 2, "--heads"),
        ("kv-heads not dividing heads", t + ["--model", "llama", "--kv-heads", "3"], 2, "--kv-heads 3"),
        ("llama in bf16", t + ["--model", "llama", "--dtype", "bf16", "--device", "cuda"], 2, "--dtype fp32"),
        ("bench negative lr", b + ["--lr", "-1"], 2, "--lr"),
        ("mpirun usage error", mpi2 + ["--lr", "nan"], 2, "--lr"),
        ("save in a missing folder", t + QUICK + ["--save", "/nonexistent/x.safetensors"], 1, "--save"),
        ("save onto a folder", t + QUICK + ["--save", p["empty"]], 1, "--save"),
        ("trace in a missing folder", t + QUICK + ["--trace", "/nonexistent/t.json"], 1, "--trace"),
        ("metrics in a missing folder", t + QUICK + ["--metrics", "/nonexistent/m.jsonl"], 1, "--metrics"),
        ("save-every without save", t + QUICK + ["--save-every", "1"], 1, "--save-every"),
        ("data-dir is a file", t + GPT + ["--data-dir", p["notst"]], 1, "--data-dir"),
        ("data-dir missing", t + GPT + ["--data-dir", "/nonexistent"], 1, "--data-dir"),
        ("data-dir of unrelated files", t + GPT + ["--data-dir", p["junk"]], 1, "--data-dir"),
        ("data-dir without fashion-mnist", t + QUICK + ["--data-dir", p["empty"]], 1, "--data-dir"),
        ("validation shorter than context", t + GPT + ["--context", "64", "--data-dir", p["short"]], 1,
         "--eval-batches 0"),
        ("mlp on text", t + QUICK + ["--data", "fortunes"], 1, "--data"),
        ("llmc without files", t + GPT + ["--data", "llmc"], 1, "--llmc-train"),
        ("llmc train not a token file", t + GPT + ["--data", "llmc", "--llmc-train", p["notst"], "--llmc-val",
                                                           p["notst"]], 1, "--llmc-train"),
        ("batch larger than the data", t + ["--steps", "2", "--batch-size", "70000"], 1, "--batch-size"),
        ("load a missing file", t + QUICK + ["--load", "/nonexistent/w.safetensors"], 1, "--load"),
        ("mpirun, load a broken file", mpi2 + QUICK + ["--load", p["notst"]], 1, "--load"),
        ("resume a missing file", t + QUICK + ["--resume", "/nonexistent/s.safetensors"], 1, "--resume"),
        ("resume a non-safetensors file", t + QUICK + ["--resume", p["notst"]], 1, "--resume"),
        ("resume weights only", t + QUICK + ["--resume", p["weights"]], 1, "--load"),
        ("resume another model", t + ["--steps", "4", "--hidden", "32", "--batch-size", "8", "--resume", p["state"]], 1,
         "--hidden"),
        ("resume another optimizer", t + ["--steps", "4", "--hidden", "16", "--batch-size", "8", "--optimizer", "adamw",
                                          "--resume", p["state"]], 1, "--optimizer"),
        ("resume with steps already done", t + QUICK + ["--resume", p["state"]], 1, "raise --steps"),
        ("cuda without a GPU", t + QUICK + ["--device", "cuda"], 1, "--device cuda"),
        ("mpirun, every rank sees a bad data-dir", mpi2 + GPT + ["--data-dir", p["junk"]], 1, "--data-dir"),
        ("mpirun, unwritable save", mpi2 + QUICK + ["--save", "/nonexistent/x.safetensors"], 1, "--save"),
        ("launcher count differs from MPI's", t + QUICK, 1, "PMI_SIZE=3", {"PMI_SIZE": "3"}),
        # Runs that cannot fit in memory (terabytes on any machine) are refused before anything is allocated.
        ("model larger than memory", t + ["--model", "gpt", "--layers", "48", "--embd", "16384", "--heads", "128",
                                          "--steps", "2"], 1, "--embd"),
        ("batch x context larger than memory", t + ["--model", "gpt", "--batch-size", "20000", "--context", "2048",
                                                    "--steps", "2"], 1, "--batch-size, --context"),
        ("mlp batch x width larger than memory", t + ["--steps", "2", "--hidden", "1000000", "--batch-size", "60000"],
         1, "--hidden"),
        ("mpirun, every rank refuses the memory", mpi2 + ["--model", "gpt", "--layers", "48", "--embd", "16384",
                                                          "--heads", "128", "--steps", "2"], 1, "x 2 ranks"),
        ("context longer than the training text", t + ["--model", "gpt", "--context", "10000000", "--steps", "2"], 1,
         "--context"),
        # --sparse-embedding-grad's refusals: a model without token-indexed rows, and what it does not combine with.
        ("sparse embedding grad on the mlp", t + QUICK + ["--sparse-embedding-grad"], 2, "--sparse-embedding-grad"),
        ("sparse embedding grad with zero 1", t + GPT + ["--sparse-embedding-grad", "--zero", "1"], 2,
         "--zero 1"),
        ("sparse embedding grad with cuda graph", t + GPT + ["--sparse-embedding-grad", "--cuda-graph",
                                                                     "--device", "cuda"], 2, "--cuda-graph"),
        ("sparse embedding grad on the emulated link", t + GPT + ["--sparse-embedding-grad", "--comm",
                                                                          "emulated"], 2, "--comm emulated"),
        ("diverging loss", t + ["--steps", "60", "--hidden", "16", "--lr", "1e6", "--weight-decay", "1e6",
                                "--check-finite", "--log-every", "1000"], 1, "the loss is"),
    ]


def has_gpu():
    """Whether this machine has a usable NVIDIA GPU (then --device cuda is valid input)."""
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout.startswith("GPU")
    except (OSError, subprocess.SubprocessError):
        return False


def main():
    failures = []
    root = tempfile.mkdtemp()
    try:
        paths = fixtures(root)
        all_cases = cases(paths)
        assert len(all_cases) >= 30
        for name, command, status, text, *env in all_cases:
            if "--device" in command and "cuda" in command and has_gpu():
                continue  # a GPU is there: not a bad input
            run_dir = tempfile.mkdtemp(dir=root)
            before = set(os.listdir(root)) | {os.path.basename(run_dir)}
            result = subprocess.run(command, cwd=run_dir, capture_output=True, text=True, timeout=120,
                                    env={**os.environ, **(env[0] if env else {})})
            under_mpirun = command[0] == mpiexec
            lines = [l for l in result.stderr.splitlines() if l.strip()]
            ours = [l for l in lines if l.startswith("minidp")] if under_mpirun else lines
            problems = []
            if result.returncode != status:
                problems.append(f"exit {result.returncode}, expected {status}")
            if len(ours) != 1:
                problems.append(f"{len(ours)} lines on stderr, expected one")
            elif text not in ours[0]:
                problems.append(f"the line does not name {text!r}")
            elif ".cpp:" in ours[0] or ".h:" in ours[0] or len(ours[0]) > 400:
                problems.append("the line holds a source path or is too long")
            if "MPI_ABORT" in result.stderr:
                problems.append("OpenMPI's MPI_ABORT banner")
            left = os.listdir(run_dir) + sorted(set(os.listdir(root)) - before)
            left += [f for f in os.listdir("/nonexistent")] if os.path.isdir("/nonexistent") else []
            if left:
                problems.append(f"files left behind: {left}")
            verdict = "ok" if not problems else "FAIL: " + "; ".join(problems)
            print(f"{name:40s} {verdict}\n    {ours[0] if len(ours) == 1 else result.stderr.strip()}")
            if problems:
                failures.append(name)
            shutil.rmtree(run_dir)
    finally:
        shutil.rmtree(root)
    print(f"{len(all_cases) - len(failures)} of {len(all_cases)} cases pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
