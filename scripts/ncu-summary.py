#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log per kernel name: where a step's GPU time goes.
Usage: ncu-summary.py NCU.csv [TOP]"""
import collections
import csv
import re
import sys

rows = [line for line in open(sys.argv[1], errors="replace") if line.startswith('"')]
total, count = collections.Counter(), collections.Counter()
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = re.sub(r"\(.*", "", r["Kernel Name"])[:90]
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(r.get("Metric Unit", "nsecond"), 1e-3)
    total[name] += float(r["Metric Value"].replace(",", "")) * scale
    count[name] += 1
allus = sum(total.values())
print(f"{sum(count.values())} kernels, {allus / 1000:.3f} ms of GPU time")
for name, us in total.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 30):
    print(f"{us / 1000:9.3f} ms {100 * us / allus:5.1f}% {count[name]:5d}x  {name}")
