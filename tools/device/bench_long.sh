#!/usr/bin/env bash
# The issue's offline-throughput benchmark on the GPU machine (after gpu_check.sh unpacked the
# bundle into /tmp/troupe_cuda): Llama-3-8B shape, bf16, dummy weights, 1000 prompts of 1000
# tokens in and 1000 out. JSON into $OUT/throughput_1000.json.
#   BENCH_MAX_NUM_SEQS=N to change max_num_seqs (default: troupe's, 256).
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
source "$(dirname "$0")/env.sh"
extra=()
[[ -n ${BENCH_MAX_NUM_SEQS:-} ]] && extra=(--max-num-seqs "$BENCH_MAX_NUM_SEQS")
echo "=== bench throughput: 1000 prompts, 1000 in, 1000 out ${extra[*]} ==="
timeout 420 "$root/bin/troupe" --log-level info bench "${long_args[@]}" "${extra[@]}" \
  --output-json "$out/throughput_1000.json" 2>&1 | grep -vE "it/s|^\s*$" | tail -n 20
