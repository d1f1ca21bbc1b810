"""The anchor and the shape grid on the CPU, end to end (no GPU here; the numbers are the CPU's and mean nothing):

- tools/torch_bench.py on tiny GPT and LLaMA shapes (SDPA where PyTorch has it) and the MLP: rows with timed
  steps, the anchor's description (AdamW with foreach on the CPU, where fused is CUDA-only), a JSON file;
  --adamw-impl fused on the CPU and --kv-heads that do not divide --heads refused with one line, exit 2.
- tools/shape_grid.py's parameter count against tests/reference/models.py's models (the MFU's N).
- tools/shape_grid.py --smoke: minidp-bench and the anchor over the two tiny shapes; OUT holds exactly grid.md,
  grid.json, grid.png (where matplotlib is), grid.log and logs.tgz; every speed-up is PyTorch's median over
  minidp's; with no budget left every run is listed as skipped and the exit status is 1.

Usage: shape_grid_smoke.py BUILD_DIR (the folder holding bin/minidp-bench)
"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import shape_grid  # noqa: E402
from models import GPT, Llama  # noqa: E402

build = os.path.abspath(sys.argv[1])
py = sys.executable
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, **kw)


with tempfile.TemporaryDirectory() as tmp:
    bench = os.path.join(ROOT, "tools", "torch_bench.py")
    tiny = ["--layers", "2", "--embd", "64", "--heads", "4", "--context", "32", "--vocab", "256", "--batch-size", "2",
            "--steps", "2", "--warmup", "1", "--device", "cpu"]
    for model, extra in (("gpt", []), ("llama", ["--kv-heads", "2", "--hidden", "96"])):
        out = os.path.join(tmp, f"{model}.json")
        r = run([py, bench, "--model", model, *tiny, *extra, "--attention", "sdpa", "--json", out])
        check(r.returncode == 0, f"torch_bench {model} exits 0 ({r.stderr.strip()[-200:]})")
        if r.returncode:
            continue
        result = json.load(open(out))
        row = result["rows"][0]
        check(len(row["step_ms"]) == 2 and row["step_ms_median"] > 0, f"{model}: two timed steps")
        check(row["compile"] == "off" and row["compile_mode"] is None, f"{model}: the eager run named as such")
        check("foreach=True" in row["optimizer"] and "AdamW" in row["optimizer"], f"{model}: foreach AdamW on the CPU")
        anchor = "\n".join(result["config"]["anchor"])
        check("fused AdamW is CUDA-only" in anchor and "attention:" in anchor and "timed:" in anchor,
              f"{model}: the anchor's description printed and saved")
        check("anchor: PyTorch" in r.stdout, f"{model}: the description on stdout")
    r = run([py, bench, "--model", "mlp", "--device", "cpu", "--steps", "2", "--warmup", "1"])
    check(r.returncode == 0 and "pytorch" in r.stdout, "torch_bench mlp runs")
    for bad, flag in ((["--model", "mlp", "--device", "cpu", "--adamw-impl", "fused"], "--adamw-impl fused"),
                      (["--model", "llama", "--device", "cpu", "--heads", "4", "--kv-heads", "3"], "--kv-heads 3")):
        r = run([py, bench, *bad])
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and flag in lines[0], f"{flag} refused in one line, exit 2")

    for s in shape_grid.shape_dicts(shape_grid.SMOKE):
        if s["family"] == "gpt":
            m = GPT(s["vocab"], s["context"], s["layers"], s["heads"], s["embd"])
        else:
            m = Llama(s["vocab"], s["context"], s["layers"], s["heads"], s["kv_heads"], s["embd"], s["hidden"])
        n = sum(p.numel() for p in m.parameters())
        check(shape_grid.parameters(s)[0] == n, f"{s['name']}: parameter count {shape_grid.parameters(s)[0]} == {n}")

    for s in shape_grid.shape_dicts(shape_grid.GRID):  # every GPU shape takes minidp's bf16 flash kernels
        d = s["embd"] // s["heads"]
        ok = s["embd"] % s["heads"] == 0 and s["heads"] % s["kv_heads"] == 0 and d in (64, 80, 96, 128, 256) and (
            s["family"] == "llama" or (s["hidden"] == 4 * s["embd"] and s["kv_heads"] == s["heads"]))
        check(ok, f"grid shape {s['name']}: {shape_grid.describe_shape(s)}")

    # minidp-bench-attention's rows (tests/ops/bench_attention.cpp's printf) and torch_attention_bench.py's.
    rows = shape_grid.parse_attention_rows(
        "flash dS      bf16    2  32   4  2048  64      0.512     268.4      1.876     256.3          -\n"
        "flash         bf16    2  32   4  2048  64      0.512     268.4      2.000     240.1   1.20e-03\n"
        "materialised  fp32    2  32  32  2048  64      9.000      15.2     30.000      16.0   0.00e+00\n"
        "torch_sdpa    bf16    2  32   4  2048  64      0.600     229.0      2.100     228.6          -  "
        "FLASH_ATTENTION\n")
    check([(r["impl"], r["shape"], r["fwd_bwd_ms"], r["backend"]) for r in rows] ==
          [("flash dS", (2, 32, 4, 2048, 64), 1.876, None), ("flash", (2, 32, 4, 2048, 64), 2.0, None),
           ("torch_sdpa", (2, 32, 4, 2048, 64), 2.1, "FLASH_ATTENTION")], "attention rows parsed")

    grid_out = os.path.join(tmp, "grid")
    cmd = [py, os.path.join(ROOT, "tools", "shape_grid.py"), grid_out, "--smoke", "--build", build]
    r = run(cmd)
    check(r.returncode == 0, f"shape_grid --smoke exits 0 ({r.stderr.strip()[-300:]})")
    files = sorted(os.listdir(grid_out)) if os.path.isdir(grid_out) else []
    try:
        import matplotlib  # noqa: F401
        expected = ["grid.json", "grid.log", "grid.md", "grid.png", "logs.tgz"]
    except ImportError:
        expected = ["grid.json", "grid.log", "grid.md", "logs.tgz"]
    check(files == expected, f"OUT holds {expected} ({files})")
    if "grid.png" in files:
        check(open(os.path.join(grid_out, "grid.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n", "grid.png is a PNG")
    if "grid.json" in files:
        g = json.load(open(os.path.join(grid_out, "grid.json")))
        check(len(g["rows"]) == len(shape_grid.SMOKE), "one row per smoke shape")
        for row in g["rows"]:
            ok = row["minidp_ms"] and row["anchor_ms"] and \
                abs(row["ratio"] - row["anchor_ms"] / row["minidp_ms"]) < 1e-9
            check(bool(ok), f"{row['shape']}: minidp and the anchor measured, speed-up = anchor / minidp")
        statuses = {(r["shape"], r["what"]): r["status"] for r in g["runs"]}
        check(all(v == "ok" for k, v in statuses.items() if k != ("attention", "minidp-bench-attention")),
              f"every run ok ({statuses})")
        sdpa = [a["sdpa"] for a in g["attention"]]
        check(all(a and a["fwd_bwd_ms"] > 0 for a in sdpa), "the attention grid's SDPA rows measured")
        with tarfile.open(os.path.join(grid_out, "logs.tgz")) as tar:
            names = tar.getnames()
        check(all(f"logs/{s[0]}_minidp.txt" in names for s in shape_grid.SMOKE), "each run's log in logs.tgz")
        md = open(os.path.join(grid_out, "grid.md")).read()
        check(all(s[0] in md for s in shape_grid.SMOKE) and "Peak memory" in md, "grid.md names the shapes")

        rendered = os.path.join(tmp, "rendered")
        r = run(cmd[:2] + [rendered, "--render", os.path.join(grid_out, "grid.json")])
        again = json.load(open(os.path.join(rendered, "grid.json"))) if r.returncode == 0 else {"rows": []}
        check([(x["shape"], x["minidp_ms"], x["anchor_ms"]) for x in again["rows"]] ==
              [(x["shape"], x["minidp_ms"], x["anchor_ms"]) for x in g["rows"]], "--render rebuilds the same rows")

    r = run(cmd[:2] + [os.path.join(tmp, "none"), "--smoke", "--build", build, "--budget-s", "1"])
    g = json.load(open(os.path.join(tmp, "none", "grid.json")))
    check(r.returncode == 1 and g["runs"] and all(x["status"].startswith(("skipped", "not run")) for x in g["runs"]),
          "no budget: every run listed as skipped, exit 1")
    r = run(cmd)
    check(r.returncode == 2 and "earlier grid" in r.stderr, "an OUT of an earlier grid refused, exit 2")

print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
