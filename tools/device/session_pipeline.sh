#!/usr/bin/env bash
# One device call (about 6 minutes of an H200, .carry/cuda carried; bundle_cuda_tests.sh here
# first): the pipelined executor (the next step's forward enqueued before this step's tokens
# are read back; TROUPE_EXECUTOR_PIPELINE=0 runs each step whole) against its floor:
#   1. the CUDA test cases (the pipelined runner's bit-for-bit case among them);
#   2. the copy-bandwidth and matrix-rate ceilings (ceilings.sh, 3 s sustained);
#   3. batch-1 latency at 128 in / 128 out, pipelined against whole steps, twice each in
#      alternation, then once with the executor's per-step split (--log-level info);
#   4. the 1000 x 1000 throughput run, pipelined, with --async-scheduling (as the run has been
#      measured since the fifth session).
# Logs under $OUT.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$out"
here=$(dirname "$0")
source "$here/env.sh"
session_tests "$out"
OUT=$out SUSTAIN_S=3 timeout 90 bash "$here/ceilings.sh" | grep -E "copy|matmul 8192\^3:"
whole="--async-scheduling TROUPE_EXECUTOR_PIPELINE=0"
VARIANTS_LATENCY_ONLY=1 timeout 150 bash "$here/variants.sh" --async-scheduling "$whole" \
  --async-scheduling "$whole" 2>&1 | sed -n '/=== summary ===/,$p'
timeout 60 "$root/bin/troupe" --log-level info bench latency "${model_args[@]}" \
  --async-scheduling --batch-size 1 --input-len 128 --output-len 128 --num-iters-warmup 1 \
  --num-iters 3 2>&1 | grep -E "executor: .*steps|scheduler: .*steps|decode time|decode-only"
timeout 300 "$root/bin/troupe" --log-level info bench "${long_args[@]}" --async-scheduling \
  --output-json "$out/throughput_1000.json" 2>&1 | grep -vE "it/s|^\s*$" | tail -n 14
