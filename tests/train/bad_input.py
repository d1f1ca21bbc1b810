#!/usr/bin/env python3
"""Bad input, as a new user would type it, against the built programs: every case runs alone and under
`mpirun -np 2` and must end with the expected exit status (2: usage, 1: runtime), exactly one line on stderr
(under mpirun: besides mpirun's own report of a non-zero exit status, which it prints for any such job; no
MPI_ABORT banner, no ORTE lines, one line from one rank) that names the flag or file, no source path, and no
file left behind, every input file byte-identical afterwards, within 120 s.

Usage: bad_input.py MPIEXEC MINIDP_TRAIN MINIDP_BENCH [NAME_PART]  (NAME_PART: only the cases whose name holds it)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from job_tools import expect_one_line, report, summary, write_fashion_mnist

mpiexec, train, bench = sys.argv[1:4]
only = sys.argv[4] if len(sys.argv) > 4 else ""
QUICK = ["--steps", "2", "--hidden", "16", "--batch-size", "8", "--eval-batches", "1"]
GPT = ["--model", "gpt", "--layers", "1", "--heads", "2", "--embd", "16", "--steps", "2", "--batch-size", "8",
       "--eval-batches", "1"]
BENCH = ["--steps", "1", "--warmup", "0", "--hidden", "16"]  # minidp-bench has no --eval-batches


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
    paths.update(checked_once_fixtures(root, paths["state"]))
    paths.update(found_at_run_time_fixtures(root))
    return paths


def found_at_run_time_fixtures(root):
    """Mistakes found after MPI started, where the ranks must agree on one line: an F16 tensor, Fashion-MNIST
    files whose counts disagree."""
    paths = {"f16": os.path.join(root, "f16.safetensors"), "counts": os.path.join(root, "counts")}
    header = json.dumps({"layers.0.weight": {"dtype": "F16", "shape": [16, 784], "data_offsets": [0, 16 * 784 * 2]}})
    header += " " * (-len(header) % 8)
    with open(paths["f16"], "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header.encode() + bytes(16 * 784 * 2))
    write_fashion_mnist(paths["counts"], train=(64, 63))
    return paths


def read_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)), n


def write_header(path, header, rest=b"", size=None):
    """A safetensors file of `header` and `rest`, grown to `size` bytes (a sparse file) when given."""
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + rest)
        if size is not None:
            f.truncate(8 + len(text) + size)


def checked_once_fixtures(root, state):
    """Training states with altered metadata, files claiming a terabyte, a FIFO, a device, a short token file."""
    paths = {}
    header, n = read_header(state)
    with open(state, "rb") as f:
        buffer = f.read()[8 + n:]
    for name, change in (("negative_step", {"step": -1}), ("many_batches", {"micro_batches": 10 ** 15}),
                         ("no_step", {"step": None}), ("text_format", {"format": "1"})):
        meta = json.loads(header["__metadata__"]["minidp"])
        meta.update(change)
        meta = {k: v for k, v in meta.items() if v is not None}
        altered = dict(header, __metadata__=dict(header["__metadata__"], minidp=json.dumps(meta)))
        paths[name] = os.path.join(root, f"state_{name}.safetensors")
        write_header(paths[name], altered, buffer)
    tib = 1 << 40  # never written: sparse files
    paths["huge_weights"] = os.path.join(root, "huge_weights.safetensors")
    write_header(paths["huge_weights"], {"layers.0.weight": {"dtype": "F32", "shape": [1 << 18, 1 << 20],
                                                             "data_offsets": [0, tib]}}, size=tib)
    paths["huge_state"] = os.path.join(root, "huge_state.safetensors")
    write_header(paths["huge_state"], {"__metadata__": header["__metadata__"],
                                       "optimizer.layers.0.weight.momentum_buffer": {
                                           "dtype": "F32", "shape": [tib // 4], "data_offsets": [0, tib]}}, size=tib)
    paths["fifo"] = os.path.join(root, "fifo")
    os.mkfifo(paths["fifo"])
    paths["device"] = paths["fifo"]
    if os.geteuid() == 0:  # a copy of /dev/null made here: the real one is never touched
        paths["device"] = os.path.join(root, "null")
        os.mknod(paths["device"], 0o666 | 0o020000, os.makedev(1, 3))
    # llm.c tokens one short of a window of --context 8 and its target; 4096 tokens, enough to train on.
    paths["short_tokens"] = os.path.join(root, "short.bin")
    with open(paths["short_tokens"], "wb") as f:
        f.write(b"".join(v.to_bytes(4, "little") for v in (20240520, 1, 8)) + bytes(4 * 253) + bytes(2 * 8))
    paths["tokens"] = os.path.join(root, "tokens.bin")
    with open(paths["tokens"], "wb") as f:
        f.write(b"".join(v.to_bytes(4, "little") for v in (20240520, 1, 4096)) + bytes(4 * 253)
                + b"".join((i % 200).to_bytes(2, "little") for i in range(4096)))
    # Other names of inputs: a hard link of the token file, a symbolic link to the state, two hard-linked outputs.
    paths["tokens_link"] = os.path.join(root, "tokens_link.bin")
    os.link(paths["tokens"], paths["tokens_link"])
    paths["state_link"] = os.path.join(root, "state_link.safetensors")
    os.symlink(state, paths["state_link"])
    paths["out_a"], paths["out_b"] = os.path.join(root, "out_a"), os.path.join(root, "out_b")
    open(paths["out_a"], "w").close()
    os.link(paths["out_a"], paths["out_b"])
    # Two symbolic links that point at each other.
    paths["loop"] = os.path.join(root, "loop_a")
    os.symlink(os.path.join(root, "loop_b"), paths["loop"])
    os.symlink(paths["loop"], os.path.join(root, "loop_b"))
    # A header whose shape's size overflows 64 bits.
    paths["overflow"] = os.path.join(root, "overflow.safetensors")
    write_header(paths["overflow"], {"w": {"dtype": "F32", "shape": [1 << 62, 4], "data_offsets": [0, 8]}}, bytes(8))
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
        ("llama bf16 head dim without a kernel", t + ["--model", "llama", "--dtype", "bf16", "--device", "cuda",
                                                       "--embd", "120", "--heads", "2", "--kv-heads", "1"], 2,
         "(--embd 120 / --heads 2) has no bf16 attention kernel"),
        ("bench negative lr", b + ["--lr", "-1"], 2, "--lr"),
        ("mpirun usage error", mpi2 + ["--lr", "nan"], 2, "--lr"),
        ("save in a missing folder", t + QUICK + ["--save", "/nonexistent/x.safetensors"], 1, "--save"),
        ("save onto a folder", t + QUICK + ["--save", p["empty"]], 1, "--save"),
        ("trace in a missing folder", t + QUICK + ["--trace", "/nonexistent/t.json"], 1, "--trace"),
        ("metrics in a missing folder", t + QUICK + ["--metrics", "/nonexistent/m.jsonl"], 1, "--metrics"),
        ("save-every without save", t + QUICK + ["--save-every", "1"], 2, "--save-every"),
        ("data-dir is a file", t + GPT + ["--data-dir", p["notst"]], 1, "--data-dir"),
        ("data-dir missing", t + GPT + ["--data-dir", "/nonexistent"], 1, "--data-dir /nonexistent: there is no folder"),
        ("data-dir of unrelated files", t + GPT + ["--data-dir", p["junk"]], 1, "--data-dir"),
        ("data-dir without fashion-mnist", t + QUICK + ["--data-dir", p["empty"]], 1, "--data-dir"),
        ("validation shorter than context", t + GPT + ["--context", "64", "--data-dir", p["short"]], 1,
         "--eval-batches 0"),
        ("mlp on text", t + QUICK + ["--data", "fortunes"], 2, "--data"),
        ("llmc without files", t + GPT + ["--data", "llmc"], 2, "--llmc-train"),
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
        # A comm hook's refusals come from its registry entry (PowerSGD's: hooks/powersgd.cpp), word for word.
        ("powersgd with zero 1", t + QUICK + ["--comm-hook", "powersgd", "--zero", "1"], 2,
         "--comm-hook powersgd with --zero 1 is not supported (its factors are all-reduced, not sharded)"),
        ("powersgd with cuda graph", t + QUICK + ["--comm-hook", "powersgd", "--cuda-graph", "--device", "cuda"], 2,
         "--comm-hook powersgd with --cuda-graph is not supported (its step counter chooses the collectives on the "
         "host)"),
        ("powersgd with fp64", t + QUICK + ["--comm-hook", "powersgd", "--dtype", "fp64"], 2,
         "--comm-hook powersgd needs fp32 gradients: not with --dtype fp64"),
        # The NCCL-only flags: a usage error on any other communicator (auto is single alone and mpi under mpirun
        # on the CPU), above --nccl-max-ctas, and registered or symmetric buffers with ZeRO-1.
        ("unknown nccl cta policy", t + QUICK + ["--nccl-cta-policy", "fast"], 2, "--nccl-cta-policy"),
        ("unknown nccl buffers", t + QUICK + ["--nccl-buffers", "pinned"], 2, "--nccl-buffers"),
        ("nccl cta policy with mpi", t + QUICK + ["--comm", "mpi", "--nccl-cta-policy", "zero"], 2,
         "--nccl-cta-policy zero is a setting of the nccl communicator; this run's is mpi"),
        ("nccl buffers on the cpu", t + QUICK + ["--nccl-buffers", "symmetric"], 2,
         "--nccl-buffers symmetric is a setting of the nccl communicator; this run's is "),
        ("nccl min ctas on the emulated link", t + QUICK + ["--comm", "emulated", "--nccl-min-ctas", "4"], 2,
         "--nccl-min-ctas 4 is a setting of the nccl communicator; this run's is emulated"),
        ("nccl min ctas above max", t + QUICK + ["--nccl-max-ctas", "2", "--nccl-min-ctas", "4"], 2,
         "--nccl-min-ctas 4 exceeds --nccl-max-ctas 2"),
        ("symmetric buffers with zero 1", t + QUICK + ["--zero", "1", "--nccl-buffers", "symmetric"], 2,
         "--nccl-buffers symmetric with --zero 1 is not supported (its in-place reduce-scatter and all-gather "
         "address each rank's shard at another offset; registered and symmetric NCCL buffers want the same offset "
         "on every rank)"),
        ("bench nccl cta policy with mpi", b + ["--comm", "mpi", "--nccl-cta-policy", "efficiency"], 2,
         "--nccl-cta-policy efficiency is a setting of the nccl communicator; this run's is mpi"),
        # Every communicator of a --nccl-max-ctas-list sweep is checked before the first one runs.
        ("bench nccl min ctas above a max of its list", b + ["--comm", "nccl", "--device", "cuda",
                                                            "--nccl-max-ctas-list", "8,2", "--nccl-min-ctas", "4"], 2,
         "--nccl-min-ctas 4 exceeds --nccl-max-ctas 2"),
        ("diverging loss", t + ["--steps", "60", "--hidden", "16", "--lr", "1e6", "--weight-decay", "1e6",
                                "--check-finite", "--log-every", "1000"], 1, "the loss is"),
        # Each flag checked once, where it is registered: NaN and values outside a flag's meaning, empty paths,
        # short ranges (no 309-digit DBL_MAX); rules between flags; outputs that are not regular files; training
        # states whose metadata or sizes are absurd, refused before anything is allocated or replayed; a token
        # file one short of a window.
        ("nan min-lr-frac", t + QUICK + ["--min-lr-frac", "nan"], 2, "--min-lr-frac"),
        ("nan clip-grad-norm", t + QUICK + ["--clip-grad-norm", "nan"], 2, "--clip-grad-norm"),
        ("nan bucket-mb", t + QUICK + ["--bucket-mb", "nan"], 2, "--bucket-mb"),
        ("nan temperature", t + QUICK + ["--temperature", "nan"], 2, "--temperature"),
        ("nan first-bucket-mb", t + QUICK + ["--first-bucket-mb", "nan"], 2, "--first-bucket-mb"),
        ("nan weight decay", t + QUICK + ["--weight-decay", "nan"], 2, "--weight-decay"),
        ("nan watchdog", t + QUICK + ["--watchdog-s", "nan"], 2, "--watchdog-s"),
        ("inf emulated bandwidth", t + QUICK + ["--emulated-gbps", "inf"], 2, "--emulated-gbps"),
        ("negative bucket-mb", t + QUICK + ["--bucket-mb", "-1"], 2, "--bucket-mb"),
        ("bucket-mb under a byte", t + QUICK + ["--bucket-mb", "1e-9"], 2, "at least one byte"),
        ("negative seed", t + QUICK + ["--seed", "-1"], 2, "--seed"),
        ("seed beyond 64 bits", t + QUICK + ["--seed", "18446744073709551616"], 2, "--seed"),
        ("log-every beyond its range", t + QUICK + ["--log-every", "1e10"], 2, "[1, 1e+09]"),
        ("negative warm-up, a short range", t + QUICK + ["--warmup-steps", "-1"], 2, "[0, 1e+09]"),
        ("negative peak-tflops, a short range", t + QUICK + ["--peak-tflops", "-1"], 2, "(0, 1e+09]"),
        ("negative top-k, a short range", t + QUICK + ["--top-k", "-2"], 2, "[0, 1e+09]"),
        ("fractional gpu", t + QUICK + ["--gpu", "0.5"], 2, "--gpu"),
        ("empty save", t + QUICK + ["--save", ""], 2, "--save"),
        ("empty resume", t + QUICK + ["--resume", ""], 2, "--resume"),
        ("empty metrics", t + QUICK + ["--metrics", ""], 2, "--metrics"),
        ("empty load", t + QUICK + ["--load", ""], 2, "--load"),
        ("empty trace", t + QUICK + ["--trace", ""], 2, "--trace"),
        ("resume with load", t + ["--steps", "4"] + QUICK[2:] + ["--resume", p["state"], "--load", p["state"]], 2,
         "not with --load"),
        ("bucket-mb auto with zero 1", t + QUICK + ["--bucket-mb", "auto", "--zero", "1"], 2, "--zero 1"),
        ("bucket-mb auto with zero 3", t + QUICK + ["--bucket-mb", "auto", "--zero", "3"], 2, "not with --zero 3"),
        ("rebuild-buckets with zero 2", t + QUICK + ["--rebuild-buckets", "--zero", "2"], 2,
         "--rebuild-buckets re-plans after the first step: not with --zero 2"),
        ("save onto a FIFO", t + QUICK + ["--save", p["fifo"]], 1, "--save " + p["fifo"] + " is a FIFO"),
        ("save onto a device", t + QUICK + ["--save", p["device"]], 1, "--save " + p["device"] + " is a"),
        ("metrics onto a FIFO", t + QUICK + ["--metrics", p["fifo"]], 1, "--metrics " + p["fifo"] + " is a FIFO"),
        ("trace onto a device", t + QUICK + ["--trace", p["device"]], 1, "--trace " + p["device"] + " is a"),
        ("diverging loss with metrics", t + ["--steps", "60", "--hidden", "16", "--lr", "1e6", "--weight-decay", "1e6",
                                             "--check-finite", "--log-every", "1000", "--metrics", "m.jsonl"], 1,
         "the loss is"),
        ("resume a negative step", t + ["--steps", "4"] + QUICK[2:] + ["--resume", p["negative_step"]], 1, '"step" is -1'),
        ("resume without a step", t + ["--steps", "4"] + QUICK[2:] + ["--resume", p["no_step"]], 1, 'has no "step"'),
        ("resume an absurd count of batches", t + ["--steps", "4"] + QUICK[2:] + ["--resume", p["many_batches"]], 1,
         '"micro_batches" is 1000000000000000'),
        ("resume a format of text", t + ["--steps", "4"] + QUICK[2:] + ["--resume", p["text_format"]], 1, 'format "1"'),
        ("load a terabyte tensor", t + QUICK + ["--load", p["huge_weights"]], 1, "has shape [262144, 1048576]"),
        ("resume a terabyte of optimizer state", t + ["--steps", "4"] + QUICK[2:] + ["--resume", p["huge_state"]], 1,
         "optimizer state 'optimizer.layers.0.weight.momentum_buffer'"),
        ("token file one short of a window", t + GPT + ["--context", "8", "--data", "llmc", "--llmc-train",
                                                        p["short_tokens"], "--llmc-val", p["short_tokens"]], 1,
         "holds 8 tokens, fewer than --context 8 + 1"),
        # Found after MPI started, on every rank: one line under mpirun too, no abort banner.
        ("width not divisible by the heads", t + ["--model", "gpt", "--layers", "1", "--heads", "3", "--embd", "16",
                                                  "--steps", "2", "--batch-size", "8", "--eval-batches", "1"], 2,
         "not divisible by --heads 3"),
        ("load a checkpoint of another shape", t + ["--steps", "2", "--hidden", "32", "--batch-size", "8", "--load",
                                                    p["state"]], 1, "the model expects [32, 784]"),
        ("load an F16 tensor", t + QUICK + ["--load", p["f16"]], 1, "F16"),
        ("fashion-mnist counts disagree", t + QUICK + ["--data-dir", p["counts"]], 1, "64 images but 63 labels"),
        ("emulated link under mpirun", mpi2 + QUICK + ["--comm", "emulated"], 1, "--comm emulated"),
        ("bf16 on the cpu", t + QUICK + ["--dtype", "bf16", "--device", "cpu"], 2, "--dtype bf16"),
        # The device before the model: the GPT's head dim 8 has no bf16 kernel, but bf16 on the CPU is the mistake.
        ("bf16 on the cpu, a head dim without a kernel", t + GPT + ["--dtype", "bf16", "--device", "cpu"], 2,
         "--dtype bf16 needs --device cuda"),
        ("tf32 on the cpu", t + QUICK + ["--tf32"], 2, "--tf32 needs --device cuda"),
        ("plain gemms on the cpu", t + QUICK + ["--plain-gemms"], 2, "--plain-gemms needs --device cuda"),
        ("plain gemms in fp32", t + QUICK + ["--plain-gemms", "--device", "cuda"], 2, "--plain-gemms needs --dtype bf16"),
        ("weight casts on the cpu", t + QUICK + ["--cast-weights"], 2, "--cast-weights needs --device cuda"),
        ("weight casts in fp32", t + QUICK + ["--cast-weights", "--device", "cuda"], 2, "--cast-weights needs --dtype bf16"),
        # A backend's device is known from the flags: a usage error before any work.
        ("nccl on the cpu", t + QUICK + ["--comm", "nccl"], 2, "--comm nccl averages CUDA tensors"),
        # mpi takes CUDA tensors (staged through pinned host buffers), but not into a CUDA graph.
        ("cuda graph over mpi", t + QUICK + ["--comm", "mpi", "--device", "cuda", "--cuda-graph"], 2,
         "--cuda-graph with --comm mpi is not supported"),
        # No validation batches, no periodic validation; validation data refused before training, not after it.
        ("eval-every without validation batches", t + GPT[:-2] + ["--eval-every", "1", "--eval-batches", "0"], 2,
         "not with --eval-batches 0"),
        ("llmc validation one short of a window", t + GPT + ["--context", "8", "--data", "llmc", "--llmc-train",
                                                             p["tokens"], "--llmc-val", p["short_tokens"]], 1,
         "--llmc-val"),
        # A token model's step cannot take more tokens than the training text holds (the MLP's images likewise).
        ("gpt step beyond the text", t + GPT + ["--grad-accum", "1000000"], 1,
         "(--batch-size x --grad-accum x ranks x --context)"),
        # Flags given where nothing reads them.
        ("llmc train without llmc data", t + QUICK + ["--llmc-train", p["tokens"]], 2,
         "--llmc-train is a file of --data llmc"),
        ("llmc val without llmc data", t + GPT + ["--llmc-val", p["tokens"]], 2, "--llmc-val is a file of --data llmc"),
        ("sample on the mlp", t + QUICK + ["--sample", "5"], 2, "--sample: --model mlp does not generate tokens"),
        ("top-k on the mlp", t + QUICK + ["--top-k", "5"], 2, "--top-k: --model mlp"),
        ("temperature on the mlp", t + QUICK + ["--temperature", "0"], 2, "--temperature: --model mlp"),
        ("zero-gather without zero 1", t + QUICK + ["--zero-gather", "overlap"], 2, "--zero-gather overlap"),
        ("zero-param-dtype without zero 3", t + QUICK + ["--zero-param-dtype", "bf16", "--zero", "1"], 2,
         "--zero-param-dtype is a setting of --zero 3"),
        ("zero-param-dtype misspelt", t + QUICK + ["--zero-param-dtype", "bf61", "--zero", "3"], 2,
         "--zero-param-dtype"),
        ("powersgd rank without powersgd", t + QUICK + ["--powersgd-rank", "2"], 2,
         "--powersgd-rank is a setting of --comm-hook powersgd"),
        ("emulated link flag without it", t + QUICK + ["--emulated-gbps", "5"], 2,
         "--emulated-gbps is a setting of --comm emulated"),
        ("nccl max ctas at its default on the cpu", t + QUICK + ["--nccl-max-ctas", "0"], 2,
         "--nccl-max-ctas is a setting of --comm nccl or emulated"),
        ("save and metrics to one file", t + QUICK + ["--save", "x", "--metrics", "x"], 2,
         "--save and --metrics both write x"),
        ("save and trace to one file", t + QUICK + ["--save", "x", "--trace", "./x"], 2, "--save and --trace both write"),
        ("metrics and trace to one file", t + QUICK + ["--metrics", "m", "--trace", "m"], 2,
         "--metrics and --trace both write m"),
        # No output on an input, by device and inode: hard links, symbolic links, other spellings.
        ("save onto the llmc training file", t + GPT + ["--data", "llmc", "--llmc-train", p["tokens"], "--llmc-val",
                                                        p["tokens"], "--save", p["tokens_link"]], 2,
         "--save " + p["tokens_link"] + " is the file --llmc-train reads"),
        ("trace onto the resumed state", t + ["--steps", "4"] + QUICK[2:] + ["--resume", p["state"], "--trace",
                                                                             p["state_link"]], 2,
         "is the file --resume reads"),
        ("metrics onto the loaded file", t + QUICK + ["--load", p["state"], "--metrics", p["root"] + "/./state.safetensors"],
         2, "--metrics " + p["root"] + "/./state.safetensors is the file --load reads"),
        ("save onto a dataset file", t + QUICK + ["--data-dir", p["counts"], "--save",
                                                  p["counts"] + "/train-labels-idx1-ubyte.gz"], 2,
         "is the file --data-dir reads"),
        ("save and metrics hard-linked", t + QUICK + ["--save", p["out_a"], "--metrics", p["out_b"]], 2,
         "--save and --metrics both write one file"),
        ("bench json onto the loaded file", b + BENCH + ["--load", p["state"], "--json", p["state_link"]], 2,
         "--json " + p["state_link"] + " is the file --load reads"),
        # Wording: what the path is, not that it is missing; the folder looked in; a shape too large; the names.
        ("save under a file", t + QUICK + ["--save", p["notst"] + "/x.safetensors"], 1,
         p["notst"] + " is a file, not a folder"),
        ("llmc train a folder", t + GPT + ["--data", "llmc", "--llmc-train", p["empty"], "--llmc-val", p["tokens"]], 1,
         p["empty"] + " is a folder, not a file"),
        ("data-dir missing names the folder", t + GPT + ["--data-dir", "nodir"], 1, "there is no folder "),
        ("load a shape too large", t + QUICK + ["--load", p["overflow"]], 1, "shape [4611686018427387904, 4] is too large"),
        ("unknown lr schedule", t + QUICK + ["--lr-schedule", "foo"], 2, "foo not in {constant,cosine,linear}"),
        ("lr schedule by number", t + QUICK + ["--lr-schedule", "2"], 2, "2 not in {constant,cosine,linear}"),
        # Every flag given twice is refused alike (list-valued ones, plain flags, "--flag=value" spellings).
        ("list flag given twice", t + QUICK + ["--hidden", "64"], 2, "--hidden is given twice"),
        ("number flag given twice", t + QUICK + ["--lr", "0.1", "--lr=0.2"], 2, "--lr is given twice"),
        ("switch given twice", t + QUICK + ["--check-finite", "--check-finite"], 2, "--check-finite is given twice"),
        ("model given twice", t + QUICK + ["--model", "mlp", "--model", "gpt"], 2, "--model is given twice"),
        ("bench flag given twice", b + BENCH + ["--hidden", "32"], 2, "--hidden is given twice"),
        # The emulated link's model in a range where its times mean something; a save of its ZeRO run (whose gathers
        # repeat rank 0's shard) refused at parse time.
        ("emulated bandwidth that underflows", t + QUICK + ["--comm", "emulated", "--emulated-gbps", "1e-300"], 2,
         "--emulated-gbps: must be in [0.001, 100000]"),
        ("emulated latency of hours", t + QUICK + ["--comm", "emulated", "--emulated-latency-us", "1e10"], 2,
         "--emulated-latency-us: must be in [0, 1e+06]"),
        ("emulated world of one", t + QUICK + ["--comm", "emulated", "--emulated-world", "1"], 2,
         "--emulated-world: must be in [2, 100000]"),
        # A model no host holds under DDP (56 B parameters): refused before it is built, pointing at --zero.
        ("a model too large for DDP", t + ["--model", "llama", "--layers", "320", "--heads", "32", "--kv-heads", "8",
                                           "--embd", "4096", "--hidden", "11008", "--context", "64", "--batch-size",
                                           "1", "--steps", "2", "--comm", "emulated", "--emulated-world", "8"], 1,
         "of host memory available; raise --zero, or lower --batch-size, --context"),
        ("emulated link with zero 3 and a save", t + QUICK + ["--comm", "emulated", "--zero", "3", "--save", "z.st"], 2,
         "--save with --comm emulated --zero 3: the emulated gathers repeat rank 0's shard"),
        ("skip-nonfinite with cuda graph", t + QUICK + ["--skip-nonfinite", "--cuda-graph", "--device", "cuda"], 2,
         "--skip-nonfinite decides on the host"),
        # Paths: what they are and what is wrong, named with the flag.
        ("llmc train longer than PATH_MAX", t + GPT + ["--data", "llmc", "--llmc-train", "a" * 5000, "--llmc-val",
                                                       p["tokens"]], 2, "--llmc-train: the path is 5000 bytes long"),
        ("load with a name longer than NAME_MAX", t + QUICK + ["--load", "d/" + "b" * 300], 2,
         "has a name of 300 bytes"),
        ("llmc train a symlink loop", t + GPT + ["--data", "llmc", "--llmc-train", p["loop"], "--llmc-val", p["tokens"]],
         1, "--llmc-train " + p["loop"] + ": a loop of symbolic links"),
        ("resume a symlink loop", t + ["--steps", "4"] + QUICK[2:] + ["--resume", p["loop"]], 1,
         "--resume " + p["loop"] + ": a loop of symbolic links"),
        ("data-dir a symlink loop", t + QUICK + ["--data-dir", p["loop"]], 1, "--data-dir " + p["loop"] + ": a loop"),
        ("llmc train a FIFO", t + GPT + ["--data", "llmc", "--llmc-train", p["fifo"], "--llmc-val", p["tokens"]], 1,
         "--llmc-train " + p["fifo"] + " is a FIFO, not a file"),
        ("llmc val a device", t + GPT + ["--data", "llmc", "--llmc-train", p["tokens"], "--llmc-val", p["device"]], 1,
         "--llmc-val " + p["device"] + " is a"),
        ("metrics with a newline", t + QUICK + ["--metrics", "m\nx"], 2, "--metrics: the path m\\nx holds a newline"),
        # minidp-bench checks what minidp-train checks, and its --json, before any work.
        ("bench json in a missing folder", b + BENCH + ["--json", "/nonexistent/b.json"], 1, "--json"),
        ("bench trace in a missing folder", b + BENCH + ["--trace", "/nonexistent/t.json"], 1, "--trace"),
        ("bench grad-accum beyond the data", b + BENCH + ["--grad-accum", "100000"], 1, "--grad-accum"),
        ("bench batch beyond the data", b + BENCH + ["--batch-size", "10000000"], 1, "--batch-size"),
        ("bench json and trace to one file", b + BENCH + ["--json", "x.json", "--trace", "x.json"], 2,
         "--trace and --json both write x.json"),
        # Ranks started with different flags (mpirun's MPMD form) agree on nothing: every rank ends at start-up.
        ("ranks with different flags", [mpiexec, "--oversubscribe", "-np", "1", train, *QUICK, "--watchdog-s", "10",
                                        ":", "-np", "1", train, *QUICK[2:], "--steps", "6", "--watchdog-s", "10"], 2,
         "--steps 2 on rank 0, 6 on rank 1"),
        ("a usage error in one app context", [mpiexec, "--oversubscribe", "-np", "1", train, *QUICK, ":", "-np", "1",
                                              train, *QUICK, "--lr", "nan"], 2, "--lr"),
        ("one usage error in both app contexts", [mpiexec, "--oversubscribe", "-np", "1", train, *QUICK, "--lr", "nan",
                                                  ":", "-np", "1", train, *QUICK, "--lr", "nan"], 2, "--lr"),
    ] + [
        # minidp-train's loop flags are not minidp-bench's: refused as unknown.
        (f"bench refuses {flag}", b + BENCH + [flag, *value], 2, f"{flag}{' ' if value else ''}{' '.join(value)}: no such flag")
        for flag, *value in (("--save", "x"), ("--metrics", "m"), ("--sample", "3"), ("--temperature", "1"),
                             ("--top-k", "2"), ("--eval-every", "1"), ("--eval-batches", "1"), ("--overlap", "on"),
                             ("--log-every", "1"), ("--peak-tflops", "3"), ("--save-every", "1"), ("--resume", "s"),
                             ("--check-finite",))
    ]


# Cases whose mistake is another under mpirun -np 2: the training state fixture holds one rank's global batch
# (2 ranks of --batch-size 8 are refused for that first).
ALONE = {"resume with steps already done", "resume a terabyte of optimizer state", "a model too large for DDP"}  # emulated: one process


def launches(name, command, env):
    """The case alone and under mpirun -np 2; a case that names its launcher (or sets the launcher's variables),
    or is in ALONE, as it is."""
    if command[0] == mpiexec or env or name in ALONE:
        return [command]
    return [command, [mpiexec, "-np", "2", "--oversubscribe", *command]]


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
        all_cases = [(name + (" (mpirun)" if launch[0] == mpiexec and command[0] != mpiexec else ""), launch, status,
                      text, *env)
                     for name, command, status, text, *env in cases(paths) for launch in launches(name, command, env)]
        assert len(all_cases) >= 60
        all_cases = [case for case in all_cases if only in case[0]]
        for name, command, status, text, *env in all_cases:
            if "--device" in command and "cuda" in command and has_gpu():
                continue  # a GPU is there: not a bad input
            run_dir = tempfile.mkdtemp(dir=root)
            problems, shown = expect_one_line(command, run_dir, status, text, root,
                                              {**os.environ, **(env[0] if env else {})}, command[0] == mpiexec)
            if os.path.isdir("/nonexistent") and os.listdir("/nonexistent"):
                problems.append(f"files left behind: {os.listdir('/nonexistent')}")
            report(name, problems, shown, failures, 40)
            shutil.rmtree(run_dir)
    finally:
        shutil.rmtree(root)
    return summary(len(all_cases), failures)


if __name__ == "__main__":
    sys.exit(main())
