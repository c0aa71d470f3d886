#!/usr/bin/env bash
# One device call (about 7 minutes of an H200, .carry/cuda carried; bundle_cuda_tests.sh here
# first): the batch-1 decode step against its floor on one machine, and the attention split
# length at three context lengths.
#   1. the CUDA test cases;
#   2. the copy-bandwidth and matrix-rate ceilings (ceilings.sh, 3 s sustained);
#   3. batch-1 latency at 128, 1024 and 3968 tokens in (128 out), the default against
#      TROUPE_DECODE_MIN_SPLIT_KEYS=${SPLIT_KEYS:-256}, each twice in alternation;
#   4. Nsight Compute's GPU time of every kernel of a few eager batch-1 decode steps, summed
#      per kernel (ncu_summary.py): what one token's time is made of, sampler included.
# Logs under $OUT.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$out"
here=$(dirname "$0")
source "$here/env.sh"
session_tests "$out"
OUT=$out SUSTAIN_S=3 timeout 90 bash "$here/ceilings.sh" | grep -E "copy|matmul"
split="--async-scheduling TROUPE_DECODE_MIN_SPLIT_KEYS=${SPLIT_KEYS:-256}"
for len in 128 1024 3968; do
  LATENCY_IN=$len VARIANTS_LATENCY_ONLY=1 timeout 150 bash "$here/variants.sh" \
    --async-scheduling "$split" --async-scheduling "$split" 2>&1 | sed -n '/=== summary ===/,$p'
done
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
if [[ -n $ncu ]]; then
  # 16 output tokens: the profiling step, a prefill and 15 decode steps; skip the first 3000
  # launches (profiling step, prefill, early decode steps) and time the next 1200.
  timeout 150 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip 3000 --launch-count 1200 "$root/bin/troupe" --log-level warn bench latency \
    "${model_args[@]}" --batch-size 1 --enforce-eager --input-len 128 --output-len 16 \
    --num-iters-warmup 0 --num-iters 1 > "$out/ncu_b1.csv" 2> "$out/ncu_b1.err"
  echo "ncu exit $?"; tail -n 3 "$out/ncu_b1.err"
  python3 "$here/ncu_summary.py" "$out/ncu_b1.csv" | tee "$out/ncu_b1_summary.txt"
else
  echo "ncu: not found"
fi
