#!/usr/bin/env bash
# The two hardware ceilings that docs/benchmarks.md divides by, measured with torch on the GPU
# machine: device-to-device copy bandwidth (read + write bytes of a 2 GiB copy, median of 20)
# and the bf16 matrix rate (8192^3 matmul, median of 10), then that matmul sustained for 30 s
# with the GPU's clock and power. Prints them and writes $OUT/ceilings.txt.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$out"
{
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
python3 - <<'PY'
import torch
torch.backends.cuda.matmul.allow_tf32 = False
s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
def median_ms(fn, n):
    for _ in range(3): fn()
    ts = []
    for _ in range(n):
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts) // 2] / 1e3
x = torch.randn(1 << 30, dtype=torch.bfloat16, device="cuda")  # 2 GiB
y = torch.empty_like(x)
t = median_ms(lambda: y.copy_(x), 20)
print(f"copy bandwidth (read+write): {2 * x.numel() * 2 / t / 1e12:.3f} TB/s")
del x, y
n = 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
t = median_ms(lambda: a @ b, 10)
print(f"bf16 matmul 8192^3: {2 * n**3 / t / 1e12:.1f} TFLOP/s")
PY
# The same matmul back to back for SUSTAIN_S seconds (default 30): the rate of each second,
# the first (a burst, as above) and the median of the last ten (what a minutes-long run can
# count on once the power limit sets the clock), with the clock and power meanwhile.
source "$(dirname "$0")/smi.sh"
smi_start "$out/smi_sustained.csv"
SUSTAIN_S=${SUSTAIN_S:-30} python3 - <<'PY'
import os, statistics, time
import torch
torch.backends.cuda.matmul.allow_tf32 = False
n = 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
c = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
for _ in range(3): torch.matmul(a, b, out=c)
torch.cuda.synchronize()
rates, end = [], time.time() + float(os.environ["SUSTAIN_S"])
while time.time() < end:
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    calls = 0
    s.record()
    t0 = time.time()
    while time.time() - t0 < 1.0:
        for _ in range(20): torch.matmul(a, b, out=c)
        calls += 20
        torch.cuda.synchronize()
    e.record(); torch.cuda.synchronize()
    rates.append(2 * n**3 * calls / (s.elapsed_time(e) / 1e3) / 1e12)
print("bf16 matmul 8192^3 per second: " + " ".join(f"{r:.0f}" for r in rates))
print(f"bf16 matmul 8192^3 sustained: first second {rates[0]:.1f} TFLOP/s, median of the last "
      f"ten {statistics.median(rates[-10:]):.1f} TFLOP/s")
PY
smi_stop "GPU during the sustained matmul"
} 2>&1 | tee "$out/ceilings.txt"
