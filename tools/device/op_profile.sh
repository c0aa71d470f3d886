#!/usr/bin/env bash
# Where a throughput run's GPU time goes, per op (TROUPE_OP_PROFILE=1, eager launches): runs
# `troupe bench throughput` on the benchmark model with --enforce-eager and writes the backend's
# table to $OUT/op_profile.txt. Default: 256 prompts x 1000 in / 256 out (prompt steps of 8192
# tokens, then decode steps of 256 sequences at ~1,000-1,250 tokens of context, as in the
# 1000 x 1000 run). Extra arguments go to the bench command (e.g. --num-prompts 64).
# On the GPU machine after run_cuda_tests.sh or gpu_check.sh unpacked the bundle.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
source "$(dirname "$0")/env.sh"
TROUPE_OP_PROFILE=1 timeout ${PROFILE_TIMEOUT:-200} "$root/bin/troupe" --log-level warn bench \
  throughput "${model_args[@]}" --enforce-eager --num-prompts 256 --input-len 1000 \
  --output-len 256 "$@" > "$out/op_profile_run.txt" 2>&1
echo "op_profile: exit $?"
grep -E "elapsed|output tokens/s|steps" "$out/op_profile_run.txt"
sed -n '/TROUPE_OP_PROFILE/,$p' "$out/op_profile_run.txt" > "$out/op_profile.txt"
head -n 45 "$out/op_profile.txt"
