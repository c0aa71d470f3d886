#!/usr/bin/env python3
"""The two hardware ceilings docs/benchmarks.md divides by, measured with PyTorch on the GPU
machine in the same call as the runs they judge (machines of one kind differ by 2-5%):

- copy: device-to-device copy of 2 GiB, bytes read + written per second (median of 20); the
  batch-1 floor is the model's weight bytes / this rate;
- matmul: bf16 8192^3 products, TFLOP/s (median of 10 after warm-up: the burst rate the
  throughput ratio divides by); with --sustain-s N also the same product back to back for N
  seconds (the rate of each second; the median of the last ten is what a minutes-long run can
  count on once the power cap lowers the clock).

    python3 tools/device/ceilings.py [--sustain-s 0] [--output-json F]
"""
import argparse
import json
import statistics
import time

import torch


def median_s(fn, n):
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    times = []
    for _ in range(n):
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sustain-s", type=float, default=0.0)
    ap.add_argument("--output-json", default="")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}

    x = torch.randn(1 << 30, dtype=torch.bfloat16, device="cuda")  # 2 GiB
    y = torch.empty_like(x)
    res["copy_tb_per_s"] = 2 * x.numel() * 2 / median_s(lambda: y.copy_(x), 20) / 1e12
    del x, y

    n = 8192
    m1 = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    m2 = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    c = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
    flops = 2 * n**3
    res["matmul_tflops_burst"] = flops / median_s(lambda: m1 @ m2, 10) / 1e12
    print(f"copy bandwidth (read+write): {res['copy_tb_per_s']:.3f} TB/s")
    print(f"bf16 matmul 8192^3: {res['matmul_tflops_burst']:.1f} TFLOP/s (burst)")

    if a.sustain_s > 0:
        rates, end = [], time.time() + a.sustain_s
        while time.time() < end:
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            calls, t0 = 0, time.time()
            start.record()
            while time.time() - t0 < 1.0:
                for _ in range(20):
                    torch.matmul(m1, m2, out=c)
                calls += 20
                torch.cuda.synchronize()
            stop.record()
            torch.cuda.synchronize()
            rates.append(flops * calls / (start.elapsed_time(stop) / 1e3) / 1e12)
        res["matmul_tflops_per_second"] = rates
        res["matmul_tflops_sustained"] = statistics.median(rates[-10:])
        print(f"bf16 matmul 8192^3 sustained {a.sustain_s:.0f} s: first second {rates[0]:.1f}, "
              f"median of the last ten {res['matmul_tflops_sustained']:.1f} TFLOP/s")
    if a.output_json:
        with open(a.output_json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
