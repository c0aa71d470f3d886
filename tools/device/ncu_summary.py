#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` report per kernel name.

    python3 tools/device/ncu_summary.py report.csv

Prints each kernel's launches, total and mean time, and its share of the total, largest first,
then the total GPU time and the number of launches (tools/device/profile.sh runs it).
"""
import csv
import sys
from collections import defaultdict


def main(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "ns")
        v = float(r["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
        rows.append((r["Kernel Name"], v * scale))
    if not rows:
        print("ncu_summary: no gpu__time_duration rows in", path)
        return 1
    per = defaultdict(lambda: [0, 0.0])
    for name, us in rows:
        short = name.split("(")[0][:90]
        per[short][0] += 1
        per[short][1] += us
    total = sum(us for _, us in rows)
    print(f"{'kernel':90s} {'calls':>6s} {'total us':>10s} {'mean us':>9s} {'share':>6s}")
    for name, (n, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:90s} {n:6d} {us:10.1f} {us / n:9.2f} {100 * us / total:5.1f}%")
    print(f"total {total:.1f} us of GPU time over {len(rows)} launches")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
