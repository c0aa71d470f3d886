#!/usr/bin/env bash
# The 1000 x 1000/1000 throughput run (tools/device/bench_long.sh's) once per argument, each
# argument a list of extra `troupe bench throughput` flags and environment assignments
# ("default" for none; env.sh's split_variant), e.g.
#   bash tools/device/long_variants.sh default "--max-num-seqs 440" TROUPE_DECODE_STAGES=2
# One summary line per variant: seconds, output tokens/s, model TFLOP/s, preemptions; then the
# time of its prompt steps and of its decode-only steps, and the GPU's clock, power and
# clock-event reasons during the run (smi.sh; the samples in $OUT/smi_long_N.csv).
# On the GPU machine after run_cuda_tests.sh or gpu_check.sh unpacked the bundle.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
source "$(dirname "$0")/env.sh"
source "$(dirname "$0")/smi.sh"
tmp=$(mktemp -d)
summary=()
n=0
for variant in "$@"; do
  split_variant "$variant"
  n=$((n + 1))
  smi_start "$out/smi_long_$n.csv"
  env "${envs[@]}" timeout 300 "$root/bin/troupe" --log-level info bench "${long_args[@]}" \
    "${flags[@]}" --output-json "$tmp/long.json" > "$tmp/log.txt" 2>&1
  smi=$(smi_stop "GPU during the run")
  pre=$(grep -oE "Preemptions: [0-9]+" "$tmp/log.txt" | tail -n 1)
  if [[ -f $tmp/long.json ]]; then
    res="$(field "$tmp/long.json" elapsed_s) s, $(field "$tmp/long.json" output_tokens_per_s)"
    res+=" tok/s, $(field "$tmp/long.json" model_tflops_per_s) TFLOP/s"
  else
    res="no result: $(tail -n 3 "$tmp/log.txt" | tr '\n' ' ')"
  fi
  summary+=("$variant: $res; ${pre:-Preemptions: n/a}")
  # The bench's split of the run by kind of step (prompt steps, decode-only steps).
  while read -r kind; do summary+=("    $kind"); done \
    < <(grep -E "steps with prompt tokens|decode-only steps|per step:|planned ahead|executor: [0-9]+ steps" \
          "$tmp/log.txt" | sed 's/^ *//; s/^.*executor: /executor: /')
  summary+=("    $smi")
  echo "${summary[-1]}"
  rm -f "$tmp/long.json"
done
echo "=== summary ==="
printf '%s\n' "${summary[@]}" | tee "$out/long_variants.txt"
