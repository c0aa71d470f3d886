#!/usr/bin/env bash
# One device call's worth of checks (about 8 minutes of an H200), with .carry/cuda carried
# (tools/device/bundle_cuda_tests.sh here first):
#   1. the CUDA test cases (run_cuda_tests.sh tests);
#   2. the op bench (all groups) into $OUT/opbench.txt;
#   3. batch-1 latency and the short throughput runs (variants.sh default);
#   4. the per-op GPU profile of an eager 256 x 1000/256 run (op_profile.sh);
#   5. the 1000 x 1000 run (long_variants.sh default), with its prompt / decode step split.
# Extra arguments are variants for steps 3 and 4 besides the default (see those scripts), e.g.
#   bash tools/device/session.sh TROUPE_DECODE_STAGES=2
# Each step has its own time limit, so a hang cannot take the whole call.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$out"
here=$(dirname "$0")
source "$here/env.sh"
session_tests "$out"
timeout 150 "$root/bin/troupe_cuda_opbench" 10 > "$out/opbench.txt" 2>&1
echo "opbench: exit $? ($(wc -l < "$out/opbench.txt") lines in opbench.txt)"
timeout 200 bash "$here/variants.sh" default "$@" 2>&1 | sed -n '/=== summary ===/,$p'
PROFILE_TIMEOUT=100 bash "$here/op_profile.sh" 2>&1 | head -n 30
timeout 300 bash "$here/long_variants.sh" default "$@" 2>&1 | sed -n '/=== summary ===/,$p'
