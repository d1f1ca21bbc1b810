#!/usr/bin/env python3
"""Charts of minidp-bench results and minidp traces (PNG, matplotlib).

  plot_bench.py bench.json -o bench.png
      step time by bucket size, overlap off vs on (median bars, p90 whiskers), and per bucket size the
      all-reduce time next to the part of it that was exposed.
  plot_bench.py --trace trace.json [--match "overlap on"] [--index -1] -o timeline.png
      one traced step: a row per rank and track (compute phases, backward layers, comm, copy), a bar per
      span. --match keeps steps whose label contains the text; --index picks one of them (default last).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# The phase names are the C++ table's (runtime::phaseName in framework/runtime/step_timer.cpp); the trace
# JSON carries them as strings, so a phase renamed there is renamed here too.
COLOURS = {
    "forward": "#4c72b0",
    "backward": "#55a868",
    "prefetch": "#8172b2",
    "finalize": "#c44e52",
    "optimizer": "#ccb974",
    "all-reduce": "#dd8452",
    "H2D": "#64b5cd",
}
LAYER_COLOURS = ["#8fd19e", "#3b8b4f"]


def bench_rows(bench):
    """The rows to chart: the pooled ones when there are repeats, else every run."""
    rows = bench["rows"]
    pooled = [r for r in rows if r["repeat"] == "all"]
    return pooled or rows


def comm_of(row):
    """The communicator a row ran on: (comm stream priority, NCCL maxCTAs)."""
    return row.get("comm_priority", "high"), row["nccl_max_ctas"]


def plot_bench(bench, out):
    rows = bench_rows(bench)
    config = bench["config"]
    comms = sorted({comm_of(r) for r in rows})  # (priority, maxCTAs); priority absent in older files
    buckets = sorted({r["bucket_mb"] for r in rows})
    groups = [(c, b) for c in comms for b in buckets]
    labels = [f"{b:g} MB" + (f"\npriority {c[0]}, maxCTAs {c[1]}" if len(comms) > 1 else "") for c, b in groups]

    def pick(c, b, overlap, key):
        values = [r[key] for r in rows
                  if comm_of(r) == c and r["bucket_mb"] == b and r["overlap"] == overlap and r[key] is not None]
        return sum(values) / len(values) if values else float("nan")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, 1.6 * len(groups) + 3), 8))
    width = 0.38
    xs = range(len(groups))
    for i, overlap in enumerate(["off", "on"]):
        medians = [pick(c, b, overlap, "step_ms_median") for c, b in groups]
        p90 = [pick(c, b, overlap, "step_ms_p90") for c, b in groups]
        err = [[0] * len(groups), [max(0.0, p - m) for p, m in zip(p90, medians)]]
        pos = [x + (i - 0.5) * width for x in xs]
        top.bar(pos, medians, width, yerr=err, capsize=3, label=f"overlap {overlap}",
                color="#999999" if overlap == "off" else "#4c72b0")
        for x, (c, b) in zip(pos, groups):
            speedup = pick(c, b, overlap, "speedup")
            if overlap == "on" and speedup == speedup:
                top.annotate(f"x{speedup:.2f}", (x, pick(c, b, overlap, "step_ms_median")), ha="center",
                             va="bottom", fontsize=8, xytext=(0, 3), textcoords="offset points")
    emulated = "EMULATED " if config.get("emulated") else ""
    top.set_title(f"{emulated}{config['model']} on {config['world']} rank(s), {config['device']}: "
                  "step time (median, whisker p90)")
    top.set_ylabel("ms per step")
    top.set_xticks(list(xs), labels)
    top.legend()

    for i, overlap in enumerate(["off", "on"]):
        pos = [x + (i - 0.5) * width for x in xs]
        comm = [pick(c, b, overlap, "comm_ms") for c, b in groups]
        exposed = [pick(c, b, overlap, "exposed_ms") for c, b in groups]
        bottom.bar(pos, comm, width, color="#dddddd", edgecolor="#777777",
                   label="all-reduce time" if i == 0 else None)
        bottom.bar(pos, exposed, width * 0.6, color="#c44e52" if overlap == "off" else "#dd8452",
                   label=f"exposed (overlap {overlap})")
    bottom.set_title("all-reduce time and the part of it compute waited for (medians)")
    bottom.set_ylabel("ms per step")
    bottom.set_xticks(list(xs), labels)
    bottom.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def colour(name, layer_index):
    if name.startswith("backward "):
        return LAYER_COLOURS[layer_index % 2]
    for prefix, c in COLOURS.items():
        if name.startswith(prefix):
            return c
    return "#aaaaaa"


def plot_trace(trace, out, match, index):
    events = trace["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    steps = {}  # pid -> matching step wrappers in time order
    starts = {}  # pid -> start times of every step wrapper: a step's spans lie before the next one
    for e in spans:
        if e["tid"] == 0 and e["name"].startswith("step "):
            starts.setdefault(e["pid"], []).append(e["ts"])
            if match is None or match in e["args"].get("label", ""):
                steps.setdefault(e["pid"], []).append(e)
    if not steps:
        sys.exit("no traced step" + (f" whose label contains '{match}'" if match else ""))
    pids = sorted(steps)
    for pid in pids:
        steps[pid].sort(key=lambda e: e["ts"])
    chosen = {pid: steps[pid][index] for pid in pids if -len(steps[pid]) <= index < len(steps[pid])}
    rows = []  # (label, [(start_ms, length_ms, name)])
    for pid in pids:
        if pid not in chosen:
            continue
        wrapper = chosen[pid]
        t0 = wrapper["ts"]
        t1 = min([t for t in starts[pid] if t > t0], default=float("inf"))
        mine = [e for e in spans if e["pid"] == pid and t0 <= e["ts"] < t1]
        tracks = [("compute", lambda e: e["tid"] == 0 and not e["name"].startswith(("step ", "backward "))),
                  ("backward layers", lambda e: e["tid"] == 0 and e["name"].startswith("backward ")),
                  ("comm", lambda e: e["tid"] == 1),
                  ("copy", lambda e: e["tid"] == 2)]
        for track, keep in tracks:
            bars = [((e["ts"] - t0) / 1e3, e["dur"] / 1e3, e["name"]) for e in mine if keep(e)]
            if bars:
                rows.append((f"rank {pid} {track}", bars))
    fig, ax = plt.subplots(figsize=(12, 0.55 * len(rows) + 1.8))
    for y, (_, bars) in enumerate(rows):
        for i, (start, length, name) in enumerate(sorted(bars)):
            ax.barh(y, max(length, 1e-3), left=start, height=0.7, color=colour(name, i), edgecolor="black",
                    linewidth=0.3)
            label = name.replace("backward ", "").replace("all-reduce bucket ", "b")
            if length > 0:
                ax.text(start + length / 2, y, label, ha="center", va="center", fontsize=6, clip_on=True)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms after the step's start (each rank's own start mark)")
    first = chosen[pids[0]]
    ax.set_title(f"{first['name']}: step {first['args']['step_ms']:.2f} ms, all-reduce {first['args']['comm_ms']:.2f} ms, "
                 f"exposed {first['args']['exposed_comm_ms']:.2f} ms (rank {pids[0]})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", nargs="?", help="minidp-bench --json output")
    parser.add_argument("--trace", help="a minidp-train / minidp-bench --trace output")
    parser.add_argument("--match", help="trace: only steps whose label contains this text")
    parser.add_argument("--index", type=int, default=-1, help="trace: which of the matching steps (default: last)")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    args = parser.parse_args()
    if (args.bench is None) == (args.trace is None):
        parser.error("give a bench JSON or --trace, not both")
    if args.trace:
        with open(args.trace) as f:
            plot_trace(json.load(f), args.output, args.match, args.index)
    else:
        with open(args.bench) as f:
            plot_bench(json.load(f), args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
