#!/usr/bin/env bash
# Where a batch-1 decode step's time goes, on the GPU machine (after gpu_check.sh or
# run_cuda_tests.sh unpacked the bundle into /tmp/troupe_cuda). Llama-3-8B shape, bf16, dummy
# weights, 128 tokens in.
#   1. troupe bench latency with --log-level info, with and without CUDA graphs: the scheduler
#      and executor print their per-step host-side breakdown at exit;
#   2. Nsight Compute (ncu, if present): the GPU time of every kernel of a few eager decode
#      steps, summed per kernel name (tools/device/ncu_summary.py), so GPU time per step can
#      be set against the wall time per step from 1.
# Output: $OUT/profile.log.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
source "$(dirname "$0")/env.sh"
T="$root/bin/troupe"
M=configs/models/llama-3-8b
common="--model $M --load-format dummy --dtype bfloat16 --max-model-len 4096 --batch-size 1"
{
  for mode in graphs eager; do
    extra=""; [[ $mode == eager ]] && extra="--enforce-eager"
    echo "=== bench latency, batch 1, 128 in / 128 out, $mode ==="
    timeout 200 $T --log-level info bench latency $common $extra --input-len 128 \
      --output-len 128 --num-iters-warmup 1 --num-iters 3 2>&1 |
      grep -E "decode time|prefill|avg latency|per step|profiled|KV blocks"
  done
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
  if [[ -n $ncu ]]; then
    echo "=== ncu: kernels of eager decode steps ($ncu) ==="
    # 16 output tokens, one run: the profiling step, a prefill and 15 decode steps. Skip the
    # first 3000 launches (profiling step, prefill, early decode steps); time the next 1200.
    timeout 300 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
      --launch-skip 3000 --launch-count 1200 \
      $T --log-level warn bench latency $common --enforce-eager --input-len 128 \
      --output-len 16 --num-iters-warmup 0 --num-iters 1 > /tmp/ncu.csv 2> /tmp/ncu.err
    echo "ncu exit $?"; tail -n 5 /tmp/ncu.err
    python3 tools/device/ncu_summary.py /tmp/ncu.csv
  else
    echo "ncu: not found"
  fi
} > "$out/profile.log" 2>&1
cat "$out/profile.log"
