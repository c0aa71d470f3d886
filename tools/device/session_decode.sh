#!/usr/bin/env bash
# One device call (about 5 minutes of an H200, .carry/cuda carried; bundle_cuda_tests.sh here
# first): decode attention against the HBM read ceiling, and the 1000 x 1000 run:
#   1. the attention test cases ([attention]);
#   2. HBM read rates (op bench "stream"), decode attention's K/V row pattern with 32 to 256 KB
#      in flight an SM;
#   3. decode attention (op bench "decode"): uniform and spread contexts, two-stage rings
#      against the default (the ninth session's calls 2-4 also had the knobs for six-stage
#      rings, L2 prefetch and early-released stages, measured and removed: docs/engine.md);
#   4. the 1000 x 1000 throughput run, --async-scheduling, once per argument ("default" or
#      NAME=VALUE knobs, e.g. TROUPE_PREFILL_MASK=every), none without arguments.
# TESTS=all runs every CUDA test case in step 1 instead; STREAM=0 skips step 2, DECODE=0 step
# 3; PREFILL=1 adds the op bench's prefill group (e.g. TROUPE_PREFILL_ROWS=16 against the
# default); RACECHECK=FILTER runs compute-sanitizer's racecheck on the test cases FILTER
# selects at the end. E.g. the tenth session's second call: TESTS=all STREAM=0 PREFILL=1
# bash tools/device/session_decode.sh TROUPE_PREFILL_ROWS=32 (then a knob, now the default)
# Logs under $OUT.
source "$(dirname "$0")/env.sh"
session_init unpack
if [[ ${TESTS:-} == all ]]; then session_tests "$out"
else "$root/bin/troupe_cuda_tests" "[attention]" 2>&1 | tail -n 3; fi
[[ ${STREAM:-1} == 1 ]] && timeout 60 "$root/bin/troupe_cuda_opbench" 10 stream 2>&1 | tee "$out/stream.txt"
[[ ${DECODE:-1} == 1 ]] && timeout 90 "$root/bin/troupe_cuda_opbench" 20 decode 2>&1 | tee "$out/decode.txt"
[[ ${PREFILL:-0} == 1 ]] && timeout 150 "$root/bin/troupe_cuda_opbench" 10 prefill 2>&1 | tee "$out/prefill.txt"
n=0
for variant in "$@"; do
  n=$((n + 1))
  echo "=== 1000 x 1000 $variant"
  long_run troupe "$variant" "$out/throughput_1000_$n.json" | grep -vE "it/s|^\s*$" | tail -n 8
done
if [[ -n ${RACECHECK:-} ]]; then  # a Catch filter: racecheck on those test cases
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
  timeout "${RACECHECK_TIMEOUT:-90}" "$sanitizer" --tool racecheck --racecheck-report analysis \
    --error-exitcode 9 --print-limit 20 "$root/bin/troupe_cuda_tests" "$RACECHECK" 2>&1 | tail -n 8
  echo "racecheck: exit ${PIPESTATUS[0]}"
fi
