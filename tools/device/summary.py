#!/usr/bin/env python3
"""The results table of docs/benchmarks.md from the JSON files that bench.sh and check.sh
write into one folder, each result against the limit measured in the same call:

  ceilings.json   ceilings.py: copy TB/s, bf16 matmul TFLOP/s (burst, sustained)
  b1.json         troupe bench latency, batch 1: ms per output token against the weight-read
                  floor (the model's bf16 weight bytes / the copy rate)
  long.json       troupe bench throughput, 1000 x 1000: output tok/s and model TFLOP/s against
                  the burst (and sustained) matmul rate
  hf.json, hf_troupe_*.json   HF transformers generate() and troupe at batch 64: the ratio

    python3 tools/device/summary.py DIR     # prints markdown rows; missing files are skipped
"""
import json
import os
import sys


def load(d, name):
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(d):
    ceil = load(d, "ceilings.json") or {}
    copy, burst = ceil.get("copy_tb_per_s"), ceil.get("matmul_tflops_burst")
    sustained = ceil.get("matmul_tflops_sustained")
    rows = []
    if copy:
        rows.append(("ceilings", f"copy {copy:.3f} TB/s; bf16 matmul {burst:.1f} TFLOP/s burst"
                     + (f", {sustained:.1f} sustained" if sustained else ""), "-"))
    b1 = load(d, "b1.json")
    if b1:
        ms = b1["decode_s_per_token"] * 1e3
        ratio = "-"
        if copy:
            floor_ms = 2 * b1["parameters"] / (copy * 1e12) * 1e3  # bf16 weights read once
            ratio = f"{ms / floor_ms:.3f}x the {floor_ms:.3f} ms weight-read floor"
        rows.append(("batch-1 decode, 128 in / 128 out", f"{ms:.3f} ms per output token", ratio))
    long = load(d, "long.json")
    if long:
        tflops = long["model_tflops_per_s"]
        ratio = "-"
        if burst:
            ratio = f"{100 * tflops / burst:.1f}% of the {burst:.1f} TFLOP/s burst matmul rate"
            if sustained:
                ratio += f" ({100 * tflops / sustained:.1f}% of the sustained)"
        rows.append(("1000 x 1000 throughput",
                     f"{long['output_tokens_per_s']:.0f} output tok/s, {long['elapsed_s']:.2f} s, "
                     f"{tflops:.1f} model TFLOP/s", ratio))
    hf = load(d, "hf.json")
    ours = [j for j in (load(d, f"hf_troupe_{i}.json") for i in (1, 2)) if j]
    if hf and ours:
        best = max(j["output_tokens_per_s"] for j in ours)
        rows.append(("HF generate comparison, batch 64, 128 in / 128 out",
                     f"troupe {best:.0f} tok/s, HF transformers {hf['output_tokens_per_s']:.0f}",
                     f"{best / hf['output_tokens_per_s']:.2f}x HF"))
    print("| run | result | against the limit |")
    print("| --- | --- | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
