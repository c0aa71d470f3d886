#!/usr/bin/env bash
# A/B of the experimental CUDA switches on the GPU machine (after gpu_check.sh or
# run_cuda_tests.sh unpacked the bundle into /tmp/troupe_cuda): for each argument, an
# list of environment assignments and bench flags ("default" for none, e.g. "TROUPE_PDL=early",
# "TROUPE_DECODE_ATTENTION=pipelined TROUPE_PDL=0" or "--max-num-seqs=512"; words that start with
# "--" go to every bench command of the variant), runs
#   batch-1 latency (128 in / 128 out, CUDA graphs) and
#   throughput 64 x 128/128 and ${BENCH_PROMPTS:-256} x ${BENCH_IN:-512}/${BENCH_OUT:-256},
# and prints one summary line per variant. Llama-3-8B shape, bf16, dummy weights.
#   BENCH_LONG=1: also the issue's 1000 x 1000/1000 throughput run (~2 min per variant).
# Usage: bash tools/device/variants.sh default "TROUPE_PDL=early" ...
set -uo pipefail
source "$(dirname "$0")/env.sh"
M=configs/models/llama-3-8b
common="--model $M --load-format dummy --dtype bfloat16 --max-model-len 4096"
tmp=$(mktemp -d)
# field FILE KEY [SCALE]: a number from a bench JSON, times SCALE, or n/a.
field() {
  python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[sys.argv[2]] * float(sys.argv[3]), 3))" \
    "$1" "$2" "${3:-1}" 2>/dev/null || echo n/a
}
summary=()
for variant in "$@"; do
  words=(); [[ $variant != default ]] && read -ra words <<< "$variant"
  envs=(); flags=()
  for w in "${words[@]}"; do
    if [[ $w == --* ]]; then flags+=("$w"); else envs+=("$w"); fi
  done
  run() {
    env "${envs[@]}" timeout 240 "$root/bin/troupe" --log-level warn bench "$@" "${flags[@]}" \
      > /dev/null
  }
  echo "=== variant: $variant ==="
  run latency $common --batch-size 1 --input-len 128 --output-len 128 --num-iters-warmup 1 \
    --num-iters 3 --output-json "$tmp/lat.json"
  run throughput $common --num-prompts 64 --input-len 128 --output-len 128 \
    --output-json "$tmp/t64.json"
  run throughput $common --num-prompts "${BENCH_PROMPTS:-256}" --input-len "${BENCH_IN:-512}" \
    --output-len "${BENCH_OUT:-256}" --output-json "$tmp/tbig.json"
  if [[ -n ${BENCH_LONG:-} ]]; then
    run throughput $common --num-prompts 1000 --input-len 1000 --output-len 1000 \
      --output-json "$tmp/long.json"
  fi
  line="$variant: b1 $(field "$tmp/lat.json" decode_s_per_token 1000) ms/token;"
  line+=" 64x128/128 $(field "$tmp/t64.json" output_tokens_per_s) tok/s;"
  line+=" ${BENCH_PROMPTS:-256}x${BENCH_IN:-512}/${BENCH_OUT:-256} $(field "$tmp/tbig.json" output_tokens_per_s) tok/s"
  [[ -n ${BENCH_LONG:-} ]] &&
    line+="; 1000x1000/1000 $(field "$tmp/long.json" output_tokens_per_s) tok/s ($(field "$tmp/long.json" model_tflops_per_s) TFLOP/s)"
  echo "$line"; summary+=("$line")
  rm -f "$tmp"/*.json
done
echo "=== summary ==="
printf '%s\n' "${summary[@]}"
