"""The side-by-side table of one multi-GPU job (scripts/multi-gpu-job.sh), as Markdown for docs/benchmarks.md.

    python3 tools/dp_summary.py OUTDIR --link socket

Reads OUTDIR's minidp-bench JSONs (bench_fp32, bench_bf16, bench_bf16_sparse, bench_zero_end,
bench_zero_overlap, bench_zero_forward, weak_np1),
torch_bench.py's (torch_fp32, torch_bf16) and minidp-bench-allreduce's (allreduce); files that are missing are
skipped. One row per framework, gradient precision, ZeRO stage and bucket cap: step time with overlap off and
on, minidp's comm, backward and exposed time, E, H = (T_off - T_on) / min(T_comm, T_backward), and the speed-up.
Then the comparisons: minidp's best cap against PyTorch DDP at the same precision and cap, and weak scaling.
"""
import argparse
import json
import os


def load(outdir, name):
    path = os.path.join(outdir, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def minidp_rows(result, label):
    """(label, wire, zero, cap, off, on) pairs from a minidp-bench JSON; pooled rows are left out."""
    if not result:
        return []
    config = result["config"]
    pairs = {}
    for r in result["rows"]:
        if r["repeat"] == "all":
            continue
        key = (str(r["bucket_mb"]), r["repeat"])
        pairs.setdefault(key, {})[r["overlap"]] = r
    out = []
    for (cap, _), p in pairs.items():
        if "off" in p and "on" in p:
            used = p["on"].get("bucket_mb_used", cap)
            shown = f"auto ({used:g})" if cap == "auto" else cap
            zero = f"1 ({config.get('zero_gather')})" if config.get("zero") else "0"
            out.append((label, config.get("grad_comm", "fp32"), zero, shown, p["off"], p["on"]))
    return out


def torch_rows(result):
    if not result:
        return []
    pairs = {}
    for r in result["rows"]:
        pairs.setdefault(r["bucket_mb"], {})[r["overlap"]] = r
    return [("PyTorch DDP", result["rows"][0].get("grad_comm", "fp32"), "0", f"{cap:g}", p.get("off"), p.get("on"))
            for cap, p in pairs.items() if "on" in p]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--link", default="?")
    args = ap.parse_args()
    rows = []
    for name, label in (("bench_fp32", "minidp"), ("bench_bf16", "minidp"),
                        ("bench_bf16_sparse", "minidp, sparse wte"), ("bench_zero_end", "minidp"),
                        ("bench_zero_overlap", "minidp"), ("bench_zero_forward", "minidp")):
        rows += minidp_rows(load(args.outdir, name), label)
    for name in ("torch_fp32", "torch_bf16"):
        rows += torch_rows(load(args.outdir, name))
    fp32 = load(args.outdir, "bench_fp32")
    world = fp32["config"]["world"] if fp32 else "?"
    shape = ""
    if fp32:
        c = fp32["config"]
        g = c.get("gpt", {})
        shape = (f"{c['model']} {g.get('layers')} layers x {g.get('embd')}, context {g.get('context')}, "
                 if g else f"{c['model']}, ") + f"{c['dtype']} compute, batch {c['batch_size']} per rank, "
    print(f"### {args.link}: {shape}{world} ranks\n")
    print("| framework | wire | ZeRO | bucket MB | off ms | on ms | comm ms | backward ms | exposed ms | E | H | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, wire, zero, cap, off, on in rows:
        step_off = off["step_ms_median"] if off else None
        speedup = on.get("speedup") or (step_off / on["step_ms_median"] if step_off else None)
        print(f"| {label} | {wire} | {zero} | {cap} | {fmt(step_off)} | {fmt(on['step_ms_median'])} | "
              f"{fmt(off.get('comm_ms') if off else None)} | {fmt(off.get('backward_ms') if off else None)} | "
              f"{fmt(on.get('exposed_ms'))} | {fmt(on.get('E'), 2)} | {fmt(on.get('H'), 2)} | "
              f"{fmt(speedup, 2)} |")

    allreduce = load(args.outdir, "allreduce")
    if allreduce:
        print(f"\nRaw all-reduce ({allreduce['communicator']}):\n")
        print("| MB | time us | algbw GB/s | busbw GB/s |\n|---|---|---|---|")
        for r in allreduce["rows"]:
            print(f"| {r['mb']:g} | {r['time_us']:.1f} | {r['algbw_gbps']:.2f} | {r['busbw_gbps']:.2f} |")

    print()
    for label, wire in (("minidp", "fp32"), ("minidp", "bf16"), ("minidp, sparse wte", "bf16")):
        mine = [r for r in rows if r[0] == label and r[1] == wire and r[2] == "0"]
        theirs = {r[3]: r[5]["step_ms_median"] for r in rows if r[0] == "PyTorch DDP" and r[1] == wire}
        if not mine or not theirs:
            continue
        best = min(mine, key=lambda r: r[5]["step_ms_median"])
        cap = str(best[5].get("bucket_mb_used", best[3]))
        cap = f"{float(cap):g}"
        versus = theirs.get(cap)
        what = f"{wire} on the wire" + (", row-sparse wte gradient" if "sparse" in label else "")
        line = (f"- {what}: minidp's best cap {best[3]} MB: {best[5]['step_ms_median']:.1f} ms, "
                f"H {fmt(best[5].get('H'), 2)}")
        if versus is not None:
            line += f"; PyTorch DDP at {cap} MB: {versus:.1f} ms ({versus / best[5]['step_ms_median']:.2f}x minidp)"
        print(line)
    weak = load(args.outdir, "weak_np1")
    if weak and fp32:
        one = min(r["step_ms_median"] for r in weak["rows"] if r["overlap"] == "on")
        two = min(r["step_ms_median"] for r in fp32["rows"] if r["overlap"] == "on")
        print(f"- weak scaling, same batch per GPU: 1 GPU {one:.1f} ms, {world} GPUs {two:.1f} ms "
              f"(efficiency {one / two:.2f})")


if __name__ == "__main__":
    main()
