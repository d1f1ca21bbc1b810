#!/usr/bin/env python3
"""Bucket all-reduces inside training against the raw ncclAllReduce at the same sizes.

Reads a minidp-bench trace (--trace, one traced step per run) and, where given, minidp-bench-allreduce's JSON.
For each run (overlap off and on per bucket cap), rank 0's buckets: size on the wire (bf16 on the wire halves
the fp32 bucket), time, and bandwidth (size / time: algbw; with 2 ranks a ring's busbw equals it), beside the
raw all-reduce of the nearest measured size. Inside training the bucket competes with backward for the GPU
and, with overlap on, waits in the comm stream's queue only after its ready event, so its time is the
collective's own.

Usage: bucket_bandwidth.py TRACE [--allreduce allreduce.json] [--min-mb 1]
"""
import argparse
import json
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--allreduce", help="minidp-bench-allreduce --json output")
    ap.add_argument("--min-mb", type=float, default=1.0, help="leave out smaller buckets (latency-bound)")
    args = ap.parse_args()
    with open(args.trace) as f:
        trace = json.load(f)
    config = trace.get("otherData", {}).get("config", {})
    wire = 0.5 if config.get("grad_comm") == "bf16" else 1.0
    raw = {}
    if args.allreduce:
        with open(args.allreduce) as f:
            raw = {r["mb"]: r["algbw_gbps"] for r in json.load(f)["rows"]}
    # Runs lie side by side on one time axis: a bucket belongs to the traced step whose span it starts in.
    steps = sorted((e["ts"], e["args"]["label"]) for e in trace["traceEvents"]
                   if e.get("pid") == 0 and e.get("cat") == "compute" and "label" in e.get("args", {}))
    buckets = {}
    for e in trace["traceEvents"]:
        if e.get("pid") == 0 and e.get("cat") == "comm" and e.get("name", "").startswith("all-reduce bucket"):
            owner = max((i for i, (ts, _) in enumerate(steps) if ts <= e["ts"]), default=None)
            if owner is not None:
                buckets.setdefault(owner, []).append(e)
    labels = {i: label for i, (_, label) in enumerate(steps)}
    print(f"wire {'bf16' if wire < 1 else 'fp32'}; buckets of at least {args.min_mb:g} MB on the wire, rank 0\n")
    print("| run | buckets | MB on the wire | median ms | median GB/s | all buckets GB/s | raw all-reduce GB/s |")
    print("|---|---|---|---|---|---|---|")
    for step in sorted(buckets):
        spans = [(b["args"]["bytes"] * wire / 1e6, b["dur"] / 1e3) for b in buckets[step]]
        big = [(mb, ms) for mb, ms in spans if mb >= args.min_mb and ms > 0]
        if not big:
            continue
        sizes = [mb for mb, _ in big]
        rates = [mb / ms for mb, ms in big]  # MB/ms = GB/s
        total = sum(mb for mb, _ in spans) / sum(ms for _, ms in spans)
        size = statistics.median(sizes)
        nearest = min(raw, key=lambda m: abs(m - size)) if raw else None
        raw_cell = f"{raw[nearest]:.2f} ({nearest:g} MB)" if nearest is not None else "-"
        print(f"| {labels.get(step, step)} | {len(big)} | {min(sizes):.1f}-{max(sizes):.1f} (median {size:.1f}) | "
              f"{statistics.median(ms for _, ms in big):.2f} | {statistics.median(rates):.2f} | {total:.2f} | "
              f"{raw_cell} |")


if __name__ == "__main__":
    main()
