"""The shape grid in one command: minidp-bench beside the PyTorch anchor (tools/torch_bench.py: torch.compile in
each mode asked, fused AdamW, SDPA, autocast bf16) on GPT and LLaMA-family shapes, and minidp-bench-attention
beside SDPA (tools/torch_attention_bench.py) on the same shapes' attention. Writes into OUT, at most five files:

    grid.md    the step table (minidp ms, each compile mode's ms, minidp's speed-up over the faster mode, MFU,
               peak memory of both and how each is counted) and the attention table (TFLOP/s, causal as half)
    grid.json  every run: command, status, wall seconds, step times, peaks, what the anchor ran
    grid.png   minidp's speed-up per shape: the whole step and attention forward + backward
    grid.log   this driver's progress lines (also on stdout)
    logs.tgz   each run's output and JSON

Every run is its own process with its own time limit (--shape-budget-s, compile included), all within
--budget-s: runs that would start after the budget is spent are listed as skipped, never dropped. Order:
the attention grid; then per shape (in the grid's order, named shapes first) minidp and compile "default";
then the max-autotune runs, shape by shape, while the budget lasts. Both frameworks run the same steps
(--warmup untimed, then --steps timed, each step synchronised) on the same llm.c token file.

    tools/shape_grid.py OUT                              # the GPU grid (build/bin, --device cuda)
    tools/shape_grid.py OUT --no-max-autotune --budget-s 300
    tools/shape_grid.py OUT --shapes tinyllama,gpt2-b16 --modes max-autotune-no-cudagraphs
    tools/shape_grid.py OUT --smoke --build build-cpu    # tiny shapes on the CPU, fp32: the pipeline end to end
    tools/shape_grid.py OUT2 --render OUT/grid.json MORE/grid.json   # two jobs' runs in one table
    tools/shape_grid.py --list

With several GPUs (an x2, x4 or x8 machine) the shapes are dealt round-robin over them, each shape's runs on
one GPU and the host's cores split between the GPUs (taskset): a grid with max-autotune fits one job there.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPILE_MODES = ["default", "max-autotune-no-cudagraphs", "max-autotune"]
TARGET = 1.15  # the bar: minidp's step at least this much faster than the faster compile mode

# name, family, layers, width, query heads, key/value heads, SwiGLU width (GPT: 4C), context, vocabulary, batch.
# Each fits one 80 GB GPU in both frameworks (fp32 weights, gradients and AdamW state; bf16 activations).
GRID = [
    ("tinyllama", "llama", 8, 2048, 32, 4, 5632, 2048, 32000, 2),     # TinyLlama-like: d 64, 8 query heads per kv
    ("gpt2-b16", "gpt", 12, 768, 12, 12, 3072, 1024, 50257, 16),      # GPT-2 small
    ("llama-readme", "llama", 12, 1024, 8, 4, 2816, 1024, 32000, 8),  # the README's llama: d 128, groups of 2
    ("gpt2-b8", "gpt", 12, 768, 12, 12, 3072, 1024, 50257, 8),
    ("llama-w4096", "llama", 4, 4096, 32, 8, 11008, 2048, 32000, 2),  # LLaMA-7B's block: d 128, groups of 4
    ("llama-ctx8k", "llama", 4, 2048, 16, 2, 5632, 8192, 32000, 1),   # context 8192, d 128, groups of 8
    ("llama-d256", "llama", 6, 2048, 8, 8, 5632, 4096, 32000, 1),     # head dim 256, no grouping
    ("llama-d80", "llama", 6, 2560, 32, 8, 6912, 2048, 32000, 2),     # head dim 80, groups of 4
    ("llama-d96-b16", "llama", 8, 1536, 16, 16, 4096, 1024, 32000, 16),  # head dim 96, batch 16
    ("gpt-ctx2k", "gpt", 8, 1024, 16, 16, 4096, 2048, 50257, 4),      # GPT-2 medium's width at context 2048
    ("gpt-d128", "gpt", 6, 1536, 12, 12, 6144, 4096, 50257, 2),       # GPT, head dim 128, context 4096
]
# --smoke: the pipeline end to end on the CPU in seconds (fp32: minidp's bf16 is CUDA-only).
SMOKE = [
    ("gpt-tiny", "gpt", 2, 64, 4, 4, 256, 64, 512, 2),
    ("llama-tiny", "llama", 2, 64, 4, 2, 96, 64, 512, 2),
]
FIELDS = ("name", "family", "layers", "embd", "heads", "kv_heads", "hidden", "context", "vocab", "batch")


def shape_dicts(table):
    return [dict(zip(FIELDS, row)) for row in table]


def describe_shape(s):
    d = s["embd"] // s["heads"]
    heads = f"{s['heads']} heads" if s["family"] == "gpt" else f"{s['heads']}/{s['kv_heads']} heads"
    mlp = "" if s["family"] == "gpt" else f", SwiGLU {s['hidden']}"
    return (f"{s['family']} {s['layers']}L, width {s['embd']}, {heads} of {d}{mlp}, ctx {s['context']}, "
            f"vocab {s['vocab']}, B{s['batch']}")


def parameters(s):
    """(all parameters, those of the lookups) of tests/reference/models.py's model at this shape."""
    L, C, V, T = s["layers"], s["embd"], s["vocab"], s["context"]
    if s["family"] == "gpt":
        return 2 * V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C, V * C + T * C
    kv = s["kv_heads"] * (C // s["heads"])
    return 2 * V * C + L * (2 * C * C + 2 * C * kv + 3 * C * s["hidden"] + 2 * C) + C, V * C


def flops_per_token(s):
    """6 x the parameters that multiply + 12 L C T (attention's two products, the causal half counted too):
    tools/torch_bench.py's count and the issue's."""
    n, lookups = parameters(s)
    return 6 * (n - lookups) + 12 * s["layers"] * s["embd"] * s["context"]


def attention_shape(s):
    """(B, H, K, T, d) of the shape's attention."""
    return s["batch"], s["heads"], s["kv_heads"], s["context"], s["embd"] // s["heads"]


class Grid:
    def __init__(self, args):
        self.args = args
        self.t0 = time.monotonic()
        self.out = os.path.abspath(args.out)
        os.makedirs(self.out, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="shape_grid_")
        self.logs = os.path.join(self.tmp, "logs")  # into OUT as one archive at the end
        os.makedirs(self.logs)
        self.attention = []
        self.sources = []  # --render: the grid.json files merged
        self.lock = threading.RLock()
        self.slot = threading.local()  # the worker's GPU and cores
        self.log_file = open(os.path.join(self.out, "grid.log"), "w")
        self.runs = []

    def elapsed(self):
        return time.monotonic() - self.t0

    def say(self, text):
        gpu = getattr(self.slot, "gpu", None)
        line = f"[{self.elapsed():5.0f} s]{f' gpu {gpu}:' if gpu is not None and self.gpus > 1 else ''} {text}"
        with self.lock:
            print(line, flush=True)
            self.log_file.write(line + "\n")
            self.log_file.flush()

    def remaining(self):
        return self.args.budget_s - self.elapsed()

    def run(self, record, cmd):
        """Runs `cmd` (output to logs/<record's log>) within the shape budget and what is left of the whole;
        fills record's status and wall_s; True when it exited 0."""
        record["cmd"] = " ".join(cmd)
        gpu, cores = getattr(self.slot, "gpu", None), getattr(self.slot, "cores", None)
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
            record["gpu"] = gpu
        if cores:  # the worker's share of the host: compile workers of one GPU's runs do not slow another's steps
            env["TORCHINDUCTOR_COMPILE_THREADS"] = str(len(cores))
            env["OMP_NUM_THREADS"] = str(min(8, len(cores)))
            cmd = ["taskset", "-c", ",".join(str(c) for c in cores)] + cmd
        record["status"] = "running"
        with self.lock:
            self.runs.append(record)
        limit = min(self.args.shape_budget_s, self.remaining())
        if limit < self.args.min_start_s:
            record["status"] = "skipped: budget"
            self.say(f"{record['shape']} {record['what']}: skipped (budget spent: {self.elapsed():.0f} s)")
            return False
        log = os.path.join(self.logs, record["log"])
        start = time.monotonic()
        with open(log, "w") as f:
            f.write("$ " + record["cmd"] + "\n")
            f.flush()
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                    start_new_session=True)
            try:
                code = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its compile workers too
                proc.wait()
                code = None
        record["wall_s"] = round(time.monotonic() - start, 1)
        record["finished_s"] = round(self.elapsed(), 1)
        if code is None:
            record["status"] = f"timeout: {limit:.0f} s"
        elif code != 0:
            with open(log) as f:
                tail = [l.strip() for l in f.read().splitlines() if l.strip()]
            record["status"] = f"error: exit {code}: " + (tail[-1][:160] if tail else "no output")
        else:
            record["status"] = "ok"
        return code == 0

    def finish_line(self, record, extra=""):
        what = f"{record['shape']} {record['what']}"
        if record["status"] == "ok":
            self.say(f"{what}: {extra} ({record['wall_s']} s)")
        elif not record["status"].startswith("skipped"):
            self.say(f"{what}: {record['status']} ({record.get('wall_s', 0)} s)")
        self.write_tables()

    def write_tables(self):
        """grid.md and grid.json of what is measured so far (a job stopped from outside keeps them)."""
        with self.lock:
            return self.write_tables_locked()

    def write_tables_locked(self):
        rows, att_rows, ceiling, modes = summarise(self, self.args.shape_list, self.attention)
        write_markdown(self, rows, att_rows, ceiling, modes, os.path.join(self.out, "grid.md"))
        a = self.args
        with open(os.path.join(self.out, "grid.json.tmp"), "w") as f:
            json.dump({"command": self.command, "device": a.device, "dtype": a.dtype, "steps": a.steps,
                       "warmup": a.warmup, "budget_s": a.budget_s, "shape_budget_s": a.shape_budget_s,
                       "elapsed_s": round(self.elapsed(), 1), "gemm_ceiling_tflops": ceiling, "modes": modes,
                       "rows": rows, "attention": att_rows, "runs": self.runs}, f, indent=2, default=str)
        os.replace(os.path.join(self.out, "grid.json.tmp"), os.path.join(self.out, "grid.json"))
        return rows, att_rows


def tokens(grid, vocab):
    """An llm.c token file pair of this vocabulary (scripts/make-random-tokens.py), made once per vocabulary."""
    folder = os.path.join(grid.tmp, f"tokens{vocab}")
    if not os.path.exists(os.path.join(folder, "train.bin")):
        subprocess.run([grid.args.python, os.path.join(ROOT, "scripts", "make-random-tokens.py"), folder, str(vocab)],
                       check=True, cwd=ROOT)
    return os.path.join(folder, "train.bin"), os.path.join(folder, "val.bin")


def model_flags(s):
    flags = ["--layers", s["layers"], "--embd", s["embd"], "--heads", s["heads"], "--context", s["context"]]
    if s["family"] == "llama":
        flags += ["--kv-heads", s["kv_heads"], "--hidden", s["hidden"]]
    return [str(f) for f in flags]


def run_minidp(grid, s):
    a = grid.args
    train, val = tokens(grid, s["vocab"])
    json_path = os.path.join(grid.logs, f"{s['name']}_minidp.json")
    cmd = [a.minidp_bench, "--model", s["family"], *model_flags(s), "--data", "llmc", "--llmc-train", train,
           "--llmc-val", val, "--device", a.device, "--optimizer", "adamw", "--dtype", a.dtype, "--batch-size",
           str(s["batch"]), "--steps", str(a.steps), "--warmup", str(a.warmup), "--bucket-mb-list", "25",
           "--json", json_path, *a.minidp_arg]
    rec = {"shape": s["name"], "what": "minidp", "framework": "minidp", "log": f"{s['name']}_minidp.txt"}
    if grid.run(rec, cmd):
        result = json.load(open(json_path))
        # minidp-bench runs the shape twice in one process (overlap off, then on: the same step on one rank);
        # the step times of both pooled, the peak the larger of the two.
        steps = [ms for row in result["rows"] for ms in row["step_ms"]]
        peaks = [row["peak_mib"] for row in result["rows"] if row.get("peak_mib") is not None]
        rec.update({"step_ms_median": statistics.median(steps), "step_ms_p90": quantile(steps, 0.9),
                    "peak_mib": max(peaks) if peaks else None, "steps_pooled": len(steps),
                    "device": result["config"].get("device")})
        grid.finish_line(rec, f"{rec['step_ms_median']:.2f} ms, peak {cell(rec['peak_mib'], '{:.0f}')} MiB")
    else:
        grid.finish_line(rec)
    return rec


def run_torch(grid, s, mode):
    """One torch_bench.py process: mode None is eager, else a torch.compile mode."""
    a = grid.args
    train, _ = tokens(grid, s["vocab"])
    label = mode or "eager"
    json_path = os.path.join(grid.logs, f"{s['name']}_torch_{label}.json")
    cmd = [a.python, os.path.join(ROOT, "tools", "torch_bench.py"), "--model", s["family"], *model_flags(s),
           "--vocab", str(s["vocab"]), "--data", train, "--dtype", a.dtype, "--attention", "sdpa",
           "--batch-size", str(s["batch"]), "--steps", str(a.steps), "--warmup", str(a.warmup), "--device", a.device,
           "--json", json_path]
    cmd += ["--compile", "off"] if mode is None else ["--compile", "on", "--compile-mode", mode]
    cmd += a.torch_arg
    rec = {"shape": s["name"], "what": f"torch {label}", "framework": "pytorch", "mode": label,
           "log": f"{s['name']}_torch_{label}.txt"}
    if grid.run(rec, cmd):
        result = json.load(open(json_path))
        row = result["rows"][0]
        if "error" in row:
            rec["status"] = row["error"]
        else:
            rec.update({"step_ms_median": row["step_ms_median"], "step_ms_p90": row["step_ms_p90"],
                        "peak_mib": row["peak_mem_mib"], "first_step_s": row.get("first_step_s"),
                        "attention_kernels": row.get("attention_kernels"), "optimizer": row.get("optimizer")})
        cfg = result["config"]
        rec.update({"gemm_ceiling_tflops": cfg.get("gemm_ceiling_tflops"), "attention": cfg.get("attention"),
                    "anchor": cfg.get("anchor"), "torch_version": cfg.get("torch_version"), "gpu": cfg.get("gpu"),
                    "flops_per_token_torch": cfg.get("flops_per_token")})
        extra = f"{rec['step_ms_median']:.2f} ms, peak {cell(rec.get('peak_mib'), '{:.0f}')} MiB, first step " \
                f"{rec.get('first_step_s') or 0:.0f} s" if "step_ms_median" in rec else rec["status"]
        grid.finish_line(rec, extra)
    else:
        grid.finish_line(rec)
    return rec


ROW = re.compile(r"^(flash dS|flash|torch_sdpa)\s+(bf16|fp32)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+"
                 r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\S+\s*(.*)$")


def parse_attention_rows(text):
    rows = []
    for line in text.splitlines():
        m = ROW.match(line.strip())
        if m:
            impl, dtype, B, H, K, T, d, fwd, fwd_tf, fb, fb_tf, backend = m.groups()
            rows.append({"impl": impl, "dtype": dtype, "shape": (int(B), int(H), int(K), int(T), int(d)),
                         "fwd_ms": float(fwd), "fwd_tflops": float(fwd_tf), "fwd_bwd_ms": float(fb),
                         "fwd_bwd_tflops": float(fb_tf), "backend": backend.strip() or None})
    return rows


def run_attention(grid, shapes):
    """minidp-bench-attention and torch_attention_bench.py over the shapes' attention (unique (B, H, K, T, d))."""
    a = grid.args
    unique = list(dict.fromkeys(attention_shape(s) for s in shapes))
    spec = ",".join(":".join(str(v) for v in sh) for sh in unique)
    dtype = "bf16" if a.dtype == "bf16" else "fp32"
    recs = []
    mdp = {"shape": "attention", "what": "minidp-bench-attention", "framework": "minidp", "log": "attention_minidp.txt"}
    if a.device == "cuda" and os.path.exists(a.minidp_attention):
        grid.attention.append(mdp)
        if grid.run(mdp, [a.minidp_attention, "--shapes", spec]):
            mdp["rows"] = parse_attention_rows(open(os.path.join(grid.logs, mdp["log"])).read())
        grid.finish_line(mdp, f"{len(mdp.get('rows', []))} rows")
    else:
        mdp["status"] = "not run: minidp-bench-attention is CUDA-only" if a.device != "cuda" else \
            f"not run: {os.path.relpath(a.minidp_attention, ROOT)} not built (CUDA builds only)"
        with grid.lock:
            grid.runs.append(mdp)
            grid.attention.append(mdp)
        grid.say(f"attention minidp: {mdp['status']}")
    recs.append(mdp)
    sdpa = {"shape": "attention", "what": "torch SDPA", "framework": "pytorch", "log": "attention_torch.txt"}
    cmd = [a.python, os.path.join(ROOT, "tools", "torch_attention_bench.py"), "--shapes", spec, "--dtype", dtype,
           "--device", a.device]
    if a.device == "cpu":
        cmd += ["--warmup", "1", "--repeats", "3"]
    grid.attention.append(sdpa)
    if grid.run(sdpa, cmd):
        sdpa["rows"] = parse_attention_rows(open(os.path.join(grid.logs, sdpa["log"])).read())
    grid.finish_line(sdpa, f"{len(sdpa.get('rows', []))} rows")
    recs.append(sdpa)
    return recs


def quantile(values, q):
    """Nearest rank, as minidp-bench's p90."""
    v = sorted(values)
    return v[max(int(-(-q * len(v) // 1)), 1) - 1]


def cell(v, fmt):
    return "-" if v is None else fmt.format(v)


def tflops(v):
    """TFLOP/s to print: one decimal, or three significant digits below 1 (the CPU's)."""
    return "-" if v is None else f"{v:.1f}" if v >= 1 else f"{v:.3g}"


def summarise(grid, shapes, attention):
    """Per shape: minidp, each torch mode, the anchor (the faster compile mode), ratio, MFU, peaks."""
    ceilings = [r["gemm_ceiling_tflops"] for r in grid.runs if r.get("gemm_ceiling_tflops")]
    ceiling = statistics.median(ceilings) if ceilings else None
    modes = grid.modes_run
    rows = []
    for s in shapes:
        mine = [r for r in grid.runs if r["shape"] == s["name"]]
        mdp = next((r for r in mine if r["framework"] == "minidp"), None)
        torch_runs = {r["mode"]: r for r in mine if r["framework"] == "pytorch"}
        timed = {m: r["step_ms_median"] for m, r in torch_runs.items() if "step_ms_median" in r}
        compiled = {m: ms for m, ms in timed.items() if m != "eager"}
        pool = compiled or timed  # without any compile mode (PyTorch 1, --modes eager): eager is the anchor
        anchor_mode = min(pool, key=pool.get) if pool else None
        row = {"shape": s["name"], "describe": describe_shape(s), "config": s,
               "flops_per_token": flops_per_token(s), "anchor_mode": anchor_mode,
               "anchor_ms": pool[anchor_mode] if anchor_mode else None,
               "minidp_ms": mdp.get("step_ms_median") if mdp else None,
               "minidp_p90_ms": mdp.get("step_ms_p90") if mdp else None,
               "minidp_peak_mib": mdp.get("peak_mib") if mdp else None,
               "minidp_status": mdp["status"] if mdp else "not run",
               "torch": {m: {k: r.get(k) for k in ("status", "step_ms_median", "step_ms_p90", "peak_mib", "wall_s",
                                                   "first_step_s", "attention", "attention_kernels")}
                         for m, r in torch_runs.items()}}
        row["anchor_peak_mib"] = torch_runs[anchor_mode].get("peak_mib") if anchor_mode else None
        row["ratio"] = row["anchor_ms"] / row["minidp_ms"] if row["anchor_ms"] and row["minidp_ms"] else None
        tokens = s["batch"] * s["context"]
        if ceiling:
            for key in ("minidp", "anchor"):
                ms = row[f"{key}_ms"]
                row[f"{key}_mfu"] = flops_per_token(s) * tokens / (ms * 1e-3) / (ceiling * 1e12) if ms else None
        row["sdpa"] = next((r.get("attention") for r in torch_runs.values() if r.get("attention")), None)
        rows.append(row)
    att_rows = []
    by = {}
    for rec in attention:
        for r in rec.get("rows", []):
            by.setdefault((r["shape"], r["impl"]), r)
    for s in shapes:
        sh = attention_shape(s)
        fwd = by.get((sh, "flash"))
        fb = by.get((sh, "flash dS")) or fwd  # what training runs: the stored-dS backward where the shape takes it
        ref = by.get((sh, "torch_sdpa"))
        att_rows.append({"shape": s["name"], "attention": sh, "minidp_fwd": fwd, "minidp_fwd_bwd": fb, "sdpa": ref,
                         "fwd_ratio": ref["fwd_ms"] / fwd["fwd_ms"] if fwd and ref else None,
                         "fwd_bwd_ratio": ref["fwd_bwd_ms"] / fb["fwd_bwd_ms"] if fb and ref else None})
    return rows, att_rows, ceiling, modes


def short_backend(text):
    if not text:
        return "-"
    m = re.search(r"picks (\w+)", text)
    if m:
        return m.group(1).replace("_ATTENTION", "").lower()
    return "explicit" if "explicit" in text else text.split(";")[0][:30]


def write_markdown(grid, rows, att_rows, ceiling, modes, path):
    a = grid.args
    anchor = next((r.get("anchor") for r in grid.runs if r.get("anchor")), None)
    device = next((r.get("gpu") for r in grid.runs if r.get("gpu")), None) or a.device
    torch_version = next((r.get("torch_version") for r in grid.runs if r.get("torch_version")), "?")
    compile_modes = [m for m in modes if m != "eager"]
    vs = "the faster compile mode" if compile_modes else "eager (no compile mode ran)"
    lines = [f"# Shape grid: minidp against the PyTorch anchor",
             "",
             f"{device}; PyTorch {torch_version}; {a.dtype}; {a.warmup} warm-up then {a.steps} timed steps each; "
             + (f"job of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {grid.elapsed():.0f} s" if not grid.sources
              else "merged from " + ", ".join(grid.sources) + " (a later job's run replaces an earlier one's; compare "
              "only runs of the same GPU kind)")
             + (f"; bf16 GEMM ceiling {ceiling:.0f} TFLOP/s (8192^3, measured in each PyTorch process, median)"
                if ceiling else ""),
             "",
             f"Speed-up = PyTorch's ms / minidp's ms against {vs}"
             + (f" (target {TARGET}x)" if a.device == "cuda" else "") + ". Step = forward, loss, backward and "
             "AdamW step, each step synchronised; median ms. minidp: `minidp-bench --dtype " + a.dtype +
             " --optimizer adamw --bucket-mb-list 25" + "".join(" " + x for x in a.minidp_arg) + "` on one GPU; "
             "PyTorch: `tools/torch_bench.py --attention sdpa --dtype " + a.dtype
             + "".join(" " + x for x in a.torch_arg) + "`, one process per mode.", ""]
    head = ["shape", "minidp ms"] + [f"{m} ms" for m in modes] + ["speed-up", "vs", "MFU minidp", "MFU PyTorch",
                                                                   "peak MiB minidp", "peak MiB PyTorch", "SDPA"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r['shape']}: {r['describe']}", cell(r["minidp_ms"], "{:.2f}") if r["minidp_ms"] else
                 status_cell(r["minidp_status"])]
        for m in modes:
            t = r["torch"].get(m)
            cells.append(cell(t["step_ms_median"], "{:.2f}") if t and t.get("step_ms_median") else
                         status_cell(t["status"] if t else "not run"))
        cells += [cell(r["ratio"], "{:.2f}x"), r["anchor_mode"] or "-", cell(r.get("minidp_mfu"), "{:.1%}"),
                  cell(r.get("anchor_mfu"), "{:.1%}"), cell(r["minidp_peak_mib"], "{:.0f}"),
                  cell(r["anchor_peak_mib"], "{:.0f}"), short_backend(r["sdpa"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["",
              "Peak memory, both counted as bytes held by live tensors, not the allocators' caches nor the CUDA "
              "context: minidp = runtime::allocatorStats().peakAllocatedBytes from the Trainer's construction "
              "through the warm-up and timed steps (the larger of minidp-bench's two runs, overlap off and on); "
              "PyTorch = torch.cuda.max_memory_allocated over the timed steps (reset after the warm-up, so "
              "compile-time autotuning buffers are not counted). MFU = (6 N without the embeddings + 12 L C T) "
              "x tokens/s / the GEMM ceiling. minidp's ms = median of both runs' timed steps.", ""]
    if anchor:
        lines += ["The anchor (tools/torch_bench.py), as printed by its first run:", "", "```"] + anchor + ["```", ""]
    lines += ["## Attention alone: minidp-bench-attention against SDPA", "",
              f"Causal, {a.dtype}, median of {3 if a.device == 'cpu' else 20} runs after "
              f"{1 if a.device == 'cpu' else 3} warm-up; TFLOP/s with the causal half counted "
              "(4 B H T^2 d / 2 forward, 3.5x that forward + backward). minidp forward + backward: the "
              "stored-dS backward where the shape takes it (as training does). Speed-up = SDPA ms / minidp ms.", ""]
    head = ["shape", "B H K T d", "minidp fwd TFLOP/s", "SDPA fwd TFLOP/s", "fwd speed-up", "minidp f+b TFLOP/s",
            "SDPA f+b TFLOP/s", "f+b speed-up", "SDPA backend"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    attention_status = {r["what"]: r["status"] for r in grid.runs if r["shape"] == "attention"}
    for r in att_rows:
        f, fb, ref = r["minidp_fwd"], r["minidp_fwd_bwd"], r["sdpa"]
        missing = status_cell(attention_status.get("minidp-bench-attention", "not run"))
        lines.append("| " + " | ".join([
            r["shape"], " ".join(str(v) for v in r["attention"]),
            tflops(f["fwd_tflops"]) if f else missing, tflops(ref and ref["fwd_tflops"]),
            cell(r["fwd_ratio"], "{:.2f}x"), tflops(fb["fwd_bwd_tflops"]) if fb else missing,
            tflops(ref and ref["fwd_bwd_tflops"]), cell(r["fwd_bwd_ratio"], "{:.2f}x"),
            (ref or {}).get("backend") or "-"]) + " |")
    skipped = [f"{r['shape']} {r['what']}: {r['status']}" for r in grid.runs if r["status"] != "ok"]
    if skipped:
        lines += ["", "Not measured: " + "; ".join(skipped) + "."]
    lines += ["", f"Command: `{grid.command}`", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def status_cell(status):
    if status.startswith("skipped"):
        return "skipped"
    if status.startswith("timeout"):
        return "timeout"
    if "out of memory" in status:
        return "OOM"
    if status.startswith("not run"):
        return "not run"
    return "error"


def write_picture(rows, att_rows, path, title, versus):
    """grid.png: minidp's speed-up per shape, the step (left) and attention forward + backward (right)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.45 * max(len(rows), 4) + 1.6), sharey=True)
    names = [r["shape"] for r in rows]
    panels = [(axes[0], [r["ratio"] for r in rows], f"training step: PyTorch ({versus}) ms / minidp ms"),
              (axes[1], [r["fwd_bwd_ratio"] for r in att_rows], "attention fwd+bwd: SDPA ms / minidp ms")]
    for ax, values, label in panels:
        ys = list(range(len(names)))
        shown = [v if v is not None else 0 for v in values]
        colors = ["#2a7" if v is not None and v >= TARGET else "#e93" if v is not None and v >= 1 else "#c33"
                  for v in values]
        ax.barh(ys, shown, color=colors)
        for y, v in zip(ys, values):
            ax.text((v or 0) + 0.01, y, f"{v:.2f}x" if v is not None else "not measured", va="center", fontsize=8)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.axvline(TARGET, color="#2a7", lw=0.8, ls="--")
        ax.set_xlabel(f"{label} (dashed: {TARGET}x)", fontsize=9)
        ax.set_xlim(0, max([v for v in values if v is not None] + [TARGET]) * 1.25)
        ax.invert_yaxis() if ax is axes[0] else None
    axes[0].set_yticks(range(len(names)))
    axes[0].set_yticklabels(names, fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="output folder ($OUT on the device); at most five files are written")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes on the CPU in fp32, 1 warm-up + 3 timed steps, eager PyTorch where "
                         "torch.compile is missing: checks the pipeline, measures nothing")
    ap.add_argument("--list", action="store_true", help="print the grid's shapes and exit")
    ap.add_argument("--shapes", help="comma-separated names of the grid to run (default: all, in the grid's order)")
    ap.add_argument("--modes", help="PyTorch runs, comma-separated: eager and/or torch.compile modes (default, "
                                    "max-autotune-no-cudagraphs, max-autotune); default: "
                                    "default,max-autotune-no-cudagraphs (--smoke: eager)")
    ap.add_argument("--no-max-autotune", action="store_true", help="drop the max-autotune modes from --modes")
    ap.add_argument("--autotune-shapes", help="shapes that get the max-autotune runs (default: every shape run, in "
                                              "order, while the budget lasts)")
    ap.add_argument("--budget-s", type=float, default=420, help="seconds for the whole grid (default 420)")
    ap.add_argument("--shape-budget-s", type=float, default=240,
                    help="seconds one run (one shape, one framework or compile mode, compile included) may take")
    ap.add_argument("--min-start-s", type=float, default=20, help="no run starts with less budget left than this")
    ap.add_argument("--steps", type=int, help="timed steps (default 20; --smoke 3)")
    ap.add_argument("--warmup", type=int, help="untimed steps before them (default 5; --smoke 1)")
    ap.add_argument("--device", choices=["cuda", "cpu"], help="default cuda (--smoke: cpu)")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], help="default bf16 (--smoke: fp32)")
    ap.add_argument("--build", default="build", help="build folder with bin/minidp-bench (default: build)")
    ap.add_argument("--gpus", type=int, help="GPUs to spread the shapes over (default: every visible one); each "
                                              "shape's runs stay on one GPU, the host's cores are split between them")
    ap.add_argument("--python", default=sys.executable, help="the interpreter with torch (default: this one)")
    ap.add_argument("--skip-minidp", action="store_true", help="PyTorch only")
    ap.add_argument("--skip-attention", action="store_true", help="no attention grid")
    ap.add_argument("--minidp-arg", action="append", default=[], help="one more minidp-bench argument (repeatable), "
                                                                      "e.g. --minidp-arg=--cuda-graph")
    ap.add_argument("--torch-arg", action="append", default=[], help="one more torch_bench.py argument (repeatable)")
    ap.add_argument("--render", nargs="+", metavar="GRID_JSON",
                    help="run nothing: write OUT's tables and picture from these grid.json files (of jobs on the same "
                         "GPU kind; for a shape's run in several, the last file's that measured it)")
    args = ap.parse_args()

    def fail(message):
        print(f"shape_grid.py: error: {message}", file=sys.stderr)
        sys.exit(2)

    table = shape_dicts(SMOKE if args.smoke else GRID)
    if args.list:
        for s in shape_dicts(GRID) + shape_dicts(SMOKE):
            print(f"{s['name']:<14} {describe_shape(s)}")
        sys.exit(0)
    if not args.out:
        fail("OUT: the output folder is missing")
    if args.render:
        return args
    known = {s["name"]: s for s in table}
    if args.shapes:
        names = [n for n in args.shapes.split(",") if n]
        unknown = [n for n in names if n not in known]
        if unknown:
            fail(f"--shapes: no shape {unknown[0]!r} in the {'smoke ' if args.smoke else ''}grid (--list names them)")
        args.shape_list = [known[n] for n in names]
    else:
        args.shape_list = table
    # --smoke on the CPU: eager unless asked (compiling takes minutes on two cores; PyTorch 1 has no compile)
    modes = [m for m in (args.modes or ("eager" if args.smoke else "default,max-autotune-no-cudagraphs")).split(",")
             if m]
    for m in modes:
        if m not in ["eager"] + COMPILE_MODES:
            fail(f"--modes: {m!r} is none of eager, {', '.join(COMPILE_MODES)}")
    if args.no_max_autotune:
        modes = [m for m in modes if not m.startswith("max-autotune")]
    args.autotune_names = set(args.autotune_shapes.split(",")) if args.autotune_shapes else None
    if args.autotune_names and not args.autotune_names <= set(known):
        fail(f"--autotune-shapes: no shape {sorted(args.autotune_names - set(known))[0]!r} in the grid")
    args.device = args.device or ("cpu" if args.smoke else "cuda")
    args.dtype = args.dtype or ("fp32" if args.smoke else "bf16")
    args.steps = args.steps if args.steps is not None else (3 if args.smoke else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 5)
    args.modes_list = modes
    build = args.build if os.path.isabs(args.build) else os.path.join(ROOT, args.build)
    args.minidp_bench = os.path.join(build, "bin", "minidp-bench")
    args.minidp_attention = os.path.join(build, "bin", "minidp-bench-attention")
    if not args.skip_minidp and not os.access(args.minidp_bench, os.X_OK):
        fail(f"--build {args.build}: no {os.path.relpath(args.minidp_bench, ROOT)} (build it first: scripts/build.sh)")
    taken = [f for f in ("grid.md", "grid.json", "grid.png", "grid.log", "logs.tgz")
             if os.path.exists(os.path.join(args.out, f))]
    if taken:
        fail(f"OUT {args.out}: holds {taken[0]} of an earlier grid (choose an empty folder)")
    return args


def visible_gpus():
    """Indices of the GPUs this job may use: CUDA_VISIBLE_DEVICES's, else nvidia-smi's list."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g for g in listed.split(",") if g.strip()]
    try:
        text = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ["0"]
    return [str(i) for i, line in enumerate(l for l in text.splitlines() if l.startswith("GPU "))] or ["0"]


def worker(grid, slot, shapes, attention_first):
    """One GPU's runs: the attention grid (worker 0), minidp and the quick PyTorch modes of its shapes, then
    max-autotune on them while the budget lasts."""
    grid.slot.gpu, grid.slot.cores = slot
    a = grid.args
    first = [m for m in a.modes_list if not m.startswith("max-autotune")]
    later = [m for m in a.modes_list if m.startswith("max-autotune")]
    try:
        if attention_first:
            run_attention(grid, a.shape_list)
        for s in shapes:
            grid.say(f"{s['name']}: {describe_shape(s)}")
            if not a.skip_minidp:
                run_minidp(grid, s)
            for m in first:
                run_torch(grid, s, None if m == "eager" else m)
        for s in shapes:
            for m in later:
                if a.autotune_names is None or s["name"] in a.autotune_names:
                    run_torch(grid, s, m)
                else:
                    with grid.lock:
                        grid.runs.append({"shape": s["name"], "what": f"torch {m}", "framework": "pytorch",
                                          "mode": m, "status": "skipped: not in --autotune-shapes"})
    except Exception as e:  # noqa: BLE001 - one worker's failure is reported, the others' results kept
        grid.say(f"worker failed: {e.__class__.__name__}: {e}")


def render(args):
    """--render: the tables and the picture of earlier grids' grid.json files, merged run by run."""
    jobs = []
    for path in args.render:
        try:
            jobs.append(json.load(open(path)))
        except (OSError, ValueError) as e:
            print(f"shape_grid.py: error: --render {path}: {e}", file=sys.stderr)
            return 2
    first = jobs[0]
    for k in ("device", "dtype", "steps", "warmup"):
        setattr(args, k, first[k])
    shapes, modes = {}, []
    for job in jobs:
        for row in job["rows"]:
            shapes.setdefault(row["shape"], row["config"])
        modes += [m for m in job["modes"] if m not in modes]
    args.shape_list, args.modes_list = list(shapes.values()), modes
    args.budget_s = args.shape_budget_s = None
    if os.path.exists(os.path.join(args.out, "grid.json")):
        print(f"shape_grid.py: error: OUT {args.out}: holds grid.json of an earlier grid (choose an empty folder)",
              file=sys.stderr)
        return 2
    grid = Grid(args)
    grid.command = " ".join(["tools/shape_grid.py"] + sys.argv[1:])
    grid.modes_run = modes
    grid.sources = [os.path.basename(os.path.dirname(os.path.abspath(p))) + "/" + os.path.basename(p)
                    for p in args.render]
    runs = {}
    for n, job in enumerate(jobs):
        for r in job["runs"]:
            r = dict(r, job=grid.sources[n])
            for row in r.get("rows", []):
                row["shape"] = tuple(row["shape"])
            key = (r["shape"], r["what"])
            if key not in runs or r["status"] == "ok" or runs[key]["status"] != "ok":
                runs[key] = r
    grid.runs = list(runs.values())
    grid.attention = [r for r in grid.runs if r["shape"] == "attention"]
    rows, att_rows = grid.write_tables()
    versus = "faster compile mode" if any(m != "eager" for m in modes) else "eager"
    try:
        write_picture(rows, att_rows, os.path.join(grid.out, "grid.png"),
                      f"minidp speed-up per shape ({args.device}, {args.dtype}; {len(jobs)} job(s))", versus)
    except ImportError as e:
        grid.say(f"no picture: {e}")
    grid.say(f"rendered {len(grid.runs)} runs of {len(jobs)} job(s) into {grid.out}")
    shutil.rmtree(grid.tmp, ignore_errors=True)
    print(open(os.path.join(grid.out, "grid.md")).read())
    return 0


def main():
    args = parse_args()
    if args.render:
        return render(args)
    grid = Grid(args)
    grid.command = " ".join(["tools/shape_grid.py"] + sys.argv[1:])
    grid.modes_run = args.modes_list
    shapes = args.shape_list
    gpus = visible_gpus() if args.device == "cuda" else [None] * (args.gpus or 1)  # CPU: workers side by side
    gpus = gpus[:args.gpus] if args.gpus else gpus
    grid.gpus = len(gpus)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    share = len(cores) // len(gpus)
    pin = len(gpus) > 1 and share >= 2 and shutil.which("taskset")
    slots = [(g, cores[i * share:(i + 1) * share] if pin else None) for i, g in enumerate(gpus)]
    workers = "GPUs" if args.device == "cuda" else "CPU workers"
    grid.say(f"{len(shapes)} shapes on {args.device} ({args.dtype}"
             f"{f', {len(gpus)} {workers}, {share} cores each' if len(gpus) > 1 else ''}), PyTorch runs: "
             f"{', '.join(args.modes_list)}; budget {args.budget_s:.0f} s, {args.shape_budget_s:.0f} s a run")
    for vocab in sorted({s["vocab"] for s in shapes}):
        tokens(grid, vocab)
    # Shapes dealt round-robin in the grid's order: every run of a shape on the same GPU.
    threads = [threading.Thread(target=worker, args=(grid, slot, shapes[i::len(slots)],
                                                     i == 0 and not args.skip_attention), daemon=True)
               for i, slot in enumerate(slots)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(1.0)
    except KeyboardInterrupt:
        grid.say("interrupted: writing what was measured")
    rows, att_rows = grid.write_tables()
    out = grid.out
    picture = "no grid.png"
    try:
        title = f"minidp speed-up per shape ({args.device}, {args.dtype}" + (
            "; SMOKE: tiny shapes on the CPU, not a measurement" if args.smoke else "") + ")"
        versus = "faster compile mode" if any(m != "eager" for m in args.modes_list) else "eager"
        write_picture(rows, att_rows, os.path.join(out, "grid.png"), title, versus)
        picture = "grid.png"
    except ImportError as e:
        grid.say(f"no picture: {e}")
    with tarfile.open(os.path.join(out, "logs.tgz"), "w:gz") as tar:
        tar.add(grid.logs, arcname="logs")
    shutil.rmtree(grid.tmp, ignore_errors=True)
    grid.say(f"wrote grid.md, grid.json, {picture}, grid.log and logs.tgz in {out}")
    grid.log_file.close()
    print(open(os.path.join(out, "grid.md")).read())
    measured = [r for r in grid.runs if r["status"] == "ok"]
    return 0 if measured else 1


if __name__ == "__main__":
    sys.exit(main())
