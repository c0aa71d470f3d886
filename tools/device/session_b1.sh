#!/usr/bin/env bash
# One device call (about 8 minutes of an H200, .carry/cuda carried; bundle_cuda_tests.sh here
# first) that checks a build and splits a batch-1 decode token's time:
#   1. the CUDA test cases;
#   2. the op bench's batch-1 group (a decode layer's GEMVs one by one and back to back,
#      lm_head, the batch-1 attention and the sampler's row): their sum is the step's kernels;
#      the GEMV lines also with TROUPE_GEMV_STAGE_X=1 (experimental, not yet run on a GPU);
#   3. batch-1 latency (128 in / 128 out, --async-scheduling) with troupe bench's per-step
#      breakdown (host planning, the executor round trip, the time inside the executor) and
#      the executor's own (host time preparing inputs and enqueueing the forward);
#   4. Nsight Compute on every skinny-GEMM launch of that op-bench group (why down + add
#      streams at 3.57 TB/s where gate_up reaches 4.01: DRAM throughput, stalls, occupancy);
#   5. racecheck on the sampler's test cases (the one compute-sanitizer run that has not
#      finished inside a call's limit yet; SANITIZE_TIMEOUT, default 200 s here).
# Each step has its own time limit. Logs under $OUT.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$out"
here=$(dirname "$0")
source "$here/env.sh"
session_tests "$out"
timeout 60 "$root/bin/troupe_cuda_opbench" 50 gemv 2>&1 | tee "$out/opbench_gemv.txt" |
  grep -E "STAGE|fused|lm_head|attention|sample"
# --log-level info: the executor's own split of each step when it goes away (host time
# preparing inputs and enqueueing the forward, during which the GPU has nothing to run).
timeout 90 "$root/bin/troupe" --log-level info bench latency "${model_args[@]}" --async-scheduling \
  --batch-size 1 --input-len 128 --output-len 128 --num-iters-warmup 1 --num-iters 3 \
  --output-json "$out/latency_b1.json" > "$out/latency_b1.txt" 2>&1
grep -E "executor: .*steps|per step|decode time|decode-only|avg latency" "$out/latency_b1.txt"
VARIANTS_LATENCY_ONLY=1 timeout 150 bash "$here/variants.sh" --async-scheduling \
  "--async-scheduling TROUPE_GEMV_STAGE_X=1" --async-scheduling \
  "--async-scheduling TROUPE_GEMV_STAGE_X=1" 2>&1 | sed -n '/=== summary ===/,$p'
OUT=$out NCU_KERNEL=gemv NCU_GROUP=gemv NCU_COUNT=64 NCU_TIMEOUT=150 bash "$here/ncu_decode.sh" |
  tail -n 80
OUT=$out SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-200} bash "$here/sanitize_all.sh" racecheck:sampling
