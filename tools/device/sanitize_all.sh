#!/usr/bin/env bash
# compute-sanitizer over the CUDA test cases, one tag at a time (memcheck slows kernels
# 10-100x, so each run has its own limit), each log under $OUT/sanitize/TOOL_TAG.log:
#   memcheck on [fused], [sampling], [ops], [attention], [graphs], [memory];
#   racecheck on [attention] and [sampling] (the kernels that share tiles in shared memory);
#   synccheck on [attention].
# Prints one summary line per run. compute-sanitizer needs a Firecracker machine (KINDS.md):
# on gVisor it refuses the device, and this says so.
# Usage (device, .carry/cuda carried): bash tools/device/sanitize_all.sh ["TOOL:TAG" ...]
set -uo pipefail
here=$(dirname "$0")
out=${OUT:-/tmp/troupe_cuda_out}
runs=("$@")
if [[ ${#runs[@]} -eq 0 ]]; then
  runs=(memcheck:fused memcheck:sampling memcheck:ops memcheck:attention memcheck:graphs
        memcheck:memory racecheck:attention racecheck:sampling synccheck:attention)
fi
mkdir -p "$out/sanitize"
for run in "${runs[@]}"; do
  tool=${run%%:*}
  tag=${run#*:}
  start=$(date +%s)
  OUT="$out/sanitize/$tool-$tag" SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-240} \
    bash "$here/run_cuda_tests.sh" sanitize "$tool" "[$tag]" > "$out/sanitize/${tool}_$tag.log" 2>&1
  rc=$?
  summary=$(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|test cases|not found|not supported" \
              "$out/sanitize/${tool}_$tag.log" | tail -n 3 | tr '\n' ' ')
  echo "sanitize $tool [$tag]: exit $rc, $(( $(date +%s) - start )) s: $summary"
done
