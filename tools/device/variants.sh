#!/usr/bin/env bash
# A/B of the experimental CUDA switches on the GPU machine (after gpu_check.sh or
# run_cuda_tests.sh unpacked the bundle into /tmp/troupe_cuda): for each argument, a list of
# environment assignments and bench flags ("default" for none, e.g. "TROUPE_PDL=early",
# "TROUPE_DECODE_ATTENTION=pipelined TROUPE_PDL=0" or "--max-num-seqs 512"; env.sh's
# split_variant: the flags go to every bench command of the variant), runs
#   batch-1 latency (${LATENCY_IN:-128} in / 128 out, CUDA graphs) and
#   throughput 64 x 128/128 and ${BENCH_PROMPTS:-256} x ${BENCH_IN:-512}/${BENCH_OUT:-256},
# and prints one summary line per variant (VARIANTS_LATENCY_ONLY=1: the latency run only).
# Llama-3-8B shape, bf16, dummy weights. The
# 1000 x 1000/1000 run has its own A/B script: long_variants.sh.
# Usage: bash tools/device/variants.sh default "TROUPE_PDL=early" ...
set -uo pipefail
source "$(dirname "$0")/env.sh"
tmp=$(mktemp -d)
summary=()
for variant in "$@"; do
  split_variant "$variant"
  run() {
    env "${envs[@]}" timeout 240 "$root/bin/troupe" --log-level warn bench "$@" "${flags[@]}" \
      > /dev/null
  }
  echo "=== variant: $variant ==="
  run latency "${model_args[@]}" --batch-size 1 --input-len "${LATENCY_IN:-128}" \
    --output-len 128 --num-iters-warmup 1 --num-iters 3 --output-json "$tmp/lat.json"
  if [[ ${VARIANTS_LATENCY_ONLY:-0} != 1 ]]; then
    run throughput "${model_args[@]}" --num-prompts 64 --input-len 128 --output-len 128 \
      --output-json "$tmp/t64.json"
    run throughput "${model_args[@]}" --num-prompts "${BENCH_PROMPTS:-256}" \
      --input-len "${BENCH_IN:-512}" --output-len "${BENCH_OUT:-256}" --output-json "$tmp/tbig.json"
  fi
  line="$variant: b1 (${LATENCY_IN:-128} in) $(field "$tmp/lat.json" decode_s_per_token 1000) ms/token;"
  line+=" 64x128/128 $(field "$tmp/t64.json" output_tokens_per_s) tok/s;"
  line+=" ${BENCH_PROMPTS:-256}x${BENCH_IN:-512}/${BENCH_OUT:-256} $(field "$tmp/tbig.json" output_tokens_per_s) tok/s"
  echo "$line"; summary+=("$line")
  rm -f "$tmp"/*.json
done
echo "=== summary ==="
printf '%s\n' "${summary[@]}"
