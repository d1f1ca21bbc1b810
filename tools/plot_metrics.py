#!/usr/bin/env python3
"""Training curves from a minidp-train --metrics file (one JSON object per logged step), as a PNG.

  plot_metrics.py metrics.jsonl [more.jsonl ...] -o curves.png [--title TEXT]

Three panels over steps: loss (train, and validation where measured), learning rate (with the gradient
norm on a second axis when logged), and throughput (tokens/s or samples/s). Several files overlay their
runs, labelled by file name.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path):
    """The logged steps of one file, in order; a torn last line (a run still writing) is skipped."""
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def column(rows, key):
    """(steps, values) of the rows that have `key`."""
    picked = [(r["step"], r[key]) for r in rows if key in r]
    return [s for s, _ in picked], [v for _, v in picked]


def plot(runs, out, title):
    fig, (ax_loss, ax_lr, ax_speed) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for label, rows in runs:
        steps, loss = column(rows, "loss")
        line, = ax_loss.plot(steps, loss, label=f"{label} train")
        vsteps, vloss = column(rows, "val_loss")
        if vsteps:
            ax_loss.plot(vsteps, vloss, "o--", color=line.get_color(), label=f"{label} validation")
        ax_lr.plot(*column(rows, "lr"), color=line.get_color(), label=f"{label} lr")
        nsteps, norm = column(rows, "grad_norm")
        if nsteps:
            ax_norm = getattr(ax_lr, "_norm_axis", None) or ax_lr.twinx()
            ax_lr._norm_axis = ax_norm
            ax_norm.plot(nsteps, norm, ":", color=line.get_color(), label=f"{label} grad norm")
            ax_norm.set_ylabel("gradient norm (dotted)")
        unit = "tokens_per_s" if any("tokens_per_s" in r for r in rows) else "samples_per_s"
        ax_speed.plot(*column(rows, unit), color=line.get_color(), label=label)
        ax_speed.set_ylabel(unit.replace("_per_s", "/s"))
    ax_loss.set_ylabel("loss (nats)")
    ax_loss.legend(fontsize=8)
    ax_loss.grid(alpha=0.3)
    ax_lr.set_ylabel("learning rate")
    ax_lr.grid(alpha=0.3)
    ax_speed.set_xlabel("step")
    ax_speed.set_ylim(bottom=0)
    ax_speed.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    ap = argparse.ArgumentParser(description="Plot minidp-train --metrics files.")
    ap.add_argument("metrics", nargs="+", help="JSON-lines files written by minidp-train --metrics")
    ap.add_argument("-o", "--output", default="curves.png", help="PNG to write")
    ap.add_argument("--title", default="", help="figure title")
    args = ap.parse_args()
    runs = [(os.path.splitext(os.path.basename(p))[0], read_metrics(p)) for p in args.metrics]
    for path, (_, rows) in zip(args.metrics, runs):
        if not rows:
            ap.error(f"{path} holds no logged steps")
    plot(runs, args.output, args.title)
    print("wrote", args.output)


if __name__ == "__main__":
    main()
