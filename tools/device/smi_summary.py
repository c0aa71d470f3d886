#!/usr/bin/env python3
"""Summarises an nvidia-smi log written by smi.sh (csv, no header, no units):
timestamp, SM clock MHz, memory clock MHz, power W, temperature C, active clock-event reasons
(a hex bitmask, NVML's nvmlClocksEventReasons). Prints one line: samples, SM clock (median,
mean, min), power (mean, max), the hottest temperature, and the share of samples in which
each reason that occurred was active. Samples with the GPU idle (reason 0x1) are left out.

Usage: smi_summary.py LOG [LABEL]
"""
import statistics
import sys

REASONS = {
    0x1: "idle", 0x2: "app clocks", 0x4: "sw power cap", 0x8: "hw slowdown",
    0x10: "sync boost", 0x20: "sw thermal", 0x40: "hw thermal", 0x80: "hw power brake",
    0x100: "display clock",
}


def main():
    path = sys.argv[1]
    label = sys.argv[2] if len(sys.argv) > 2 else path
    rows = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 6:
                continue
            try:
                sm, power, temp = float(parts[1]), float(parts[3]), float(parts[4])
                reasons = int(parts[5], 16)
            except ValueError:
                continue
            if reasons & 0x1:
                continue
            rows.append((sm, power, temp, reasons))
    if not rows:
        print(f"{label}: no busy samples in {path}")
        return
    sm = [r[0] for r in rows]
    power = [r[1] for r in rows]
    counts = {}
    for r in rows:
        for bit, name in REASONS.items():
            if r[3] & bit:
                counts[name] = counts.get(name, 0) + 1
    why = ", ".join(f"{name} {100.0 * n / len(rows):.0f}%" for name, n in sorted(counts.items()))
    print(f"{label}: {len(rows)} busy samples; SM clock median {statistics.median(sm):.0f} MHz, "
          f"mean {statistics.mean(sm):.0f}, min {min(sm):.0f}; power mean "
          f"{statistics.mean(power):.0f} W, max {max(power):.0f}; temperature max "
          f"{max(r[2] for r in rows):.0f} C; clock-event reasons: {why or 'none'}")


if __name__ == "__main__":
    main()
