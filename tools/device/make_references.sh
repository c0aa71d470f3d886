#!/usr/bin/env bash
# Run on the GPU machine (it has torch + transformers): writes the model-parity fixtures,
# trains the embedded default model and measures the two hardware ceilings, all into $OUT.
#   carry: build-train/fortunes   (made here by tools/train_tiny/prepare_data.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/fx /tmp/tr
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 - <<'PY' 2>&1 | tee -a "$OUT/gpu.txt"
import torch, time
torch.backends.cuda.matmul.allow_tf32 = False
x = torch.randn(1 << 30, dtype=torch.bfloat16, device="cuda")  # 2 GiB
y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize(); s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
ts = []
for _ in range(20):
    s.record(); y.copy_(x); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
ts.sort(); t = ts[len(ts) // 2] / 1e3
print(f"copy bandwidth (read+write): {2 * x.numel() * 2 / t / 1e12:.3f} TB/s")
del x, y
n = 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda"); b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
for _ in range(3): a @ b
ts = []
for _ in range(10):
    s.record(); a @ b; e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
ts.sort(); t = ts[len(ts) // 2] / 1e3
print(f"bf16 matmul 8192^3: {2 * n**3 / t / 1e12:.1f} TFLOP/s")
PY
python3 tools/make_fixtures.py /tmp/fx 2>&1 | tee "$OUT/fixtures.log"
tar czf "$OUT/fixtures.tgz" -C /tmp/fx .
python3 tools/train_tiny/train.py build-train/fortunes /tmp/tr --seconds "${TRAIN_SECONDS:-240}" 2>&1 | tee "$OUT/train.log"
tar czf "$OUT/train.tgz" -C /tmp/tr .
ls -la "$OUT"
