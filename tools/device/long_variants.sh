#!/usr/bin/env bash
# The 1000 x 1000/1000 throughput run (tools/device/bench_long.sh's) once per argument, each
# argument a list of extra `troupe bench throughput` flags and environment assignments
# ("default" for none), e.g.
#   bash tools/device/long_variants.sh default "--max-num-seqs 440" TROUPE_LT_TUNE=1
# One summary line per variant: seconds, output tokens/s, model TFLOP/s, preemptions.
# On the GPU machine after run_cuda_tests.sh or gpu_check.sh unpacked the bundle.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
source "$(dirname "$0")/env.sh"
tmp=$(mktemp -d)
summary=()
for variant in "$@"; do
  words=(); [[ $variant != default ]] && read -ra words <<< "$variant"
  flags=(); envs=()
  for w in "${words[@]}"; do
    if [[ $w != -* && $w == *=* ]]; then envs+=("$w"); else flags+=("$w"); fi
  done
  env "${envs[@]}" timeout 300 "$root/bin/troupe" --log-level info bench throughput \
    --model configs/models/llama-3-8b --load-format dummy --dtype bfloat16 --max-model-len 4096 \
    --num-prompts 1000 --input-len 1000 --output-len 1000 "${flags[@]}" \
    --output-json "$tmp/long.json" > "$tmp/log.txt" 2>&1
  pre=$(grep -oE "Preemptions: [0-9]+" "$tmp/log.txt" | tail -n 1)
  res=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.1f s, %.0f tok/s, %.1f TFLOP/s' % (d['elapsed_s'], d['output_tokens_per_s'], d['model_tflops_per_s']))" "$tmp/long.json" 2>/dev/null) ||
    res="no result: $(tail -n 3 "$tmp/log.txt" | tr '\n' ' ')"
  summary+=("$variant: $res; ${pre:-Preemptions: n/a}")
  echo "${summary[-1]}"
  rm -f "$tmp/long.json"
done
echo "=== summary ==="
printf '%s\n' "${summary[@]}" | tee "$out/long_variants.txt"
