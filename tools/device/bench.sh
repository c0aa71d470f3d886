#!/usr/bin/env bash
# The benchmarks of docs/benchmarks.md on the GPU machine (carry .carry/cuda, made here by
# tools/device/bundle.sh). Llama-3-8B's shape, bf16, dummy weights (configs/models/llama-3-8b).
#   bench.sh [STEP ...]   (default: ceilings latency long hf), each STEP one of
#     ceilings  copy rate and bf16 matmul rate (ceilings.py; SUSTAIN_S seconds of sustained
#               matmul, default 3): the limits the others are divided by, so run it in the
#               same call
#     latency   batch-1 decode, 128 in / 128 out (b1.json)
#     long      1000 prompts x 1000 in / 1000 out (long.json), with nvidia-smi's clock, power
#               and clock-event reasons during the run
#     hf        HF transformers generate() at batch 64, 128 in / 128 out (best of two), and
#               troupe on the same prompts twice: the ratio of the best of each
#     invariant the cost of --batch-invariant: batch-1 decode with it (b1_invariant.json;
#               compare latency's b1.json), and 256 prompts x 512 in / 256 out without and
#               with it (mid.json, mid_invariant.json)
#     opbench   troupe_cuda_opbench (per-op time, GB/s, TFLOP/s on Llama-3-8B shapes);
#               OPBENCH="ITERS [GROUP]" (default "20"; groups: its usage line)
# Writes $OUT/NAME.json and NAME.log per run and prints the results table (summary.py). About
# 20 s for ceilings, 1 minute for latency, 3 for long, 3 for hf on an H200.
source "$(dirname "$0")/env.sh"
unpack_bundle || exit 2
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(ceilings latency long hf)
rc=0
for step in "${steps[@]}"; do
  start=$(date +%s)
  case $step in
    ceilings)
      timeout 120 python3 "$here/ceilings.py" --sustain-s "${SUSTAIN_S:-3}" \
        --output-json "$out/ceilings.json" || rc=1 ;;
    latency)
      bench b1 150 "${b1_args[@]}" || rc=1
      steps "$out/b1.log" ;;
    long)
      smi_start "$out/smi_long.csv"
      bench long 300 "${long_args[@]}" || rc=1
      smi_stop "GPU during the 1000 x 1000 run"
      steps "$out/long.log" ;;
    hf)
      timeout 240 python3 "$here/hf_generate_bench.py" configs/models/llama-3-8b --batch-size 64 \
        --input-len 128 --output-len 128 --output-json "$out/hf.json" > "$out/hf.log" 2>&1 || rc=1
      for i in 1 2; do
        bench "hf_troupe_$i" 120 throughput "${model_args[@]}" --async-scheduling \
          --num-prompts 64 --input-len 128 --output-len 128 || rc=1
      done ;;
    invariant)
      bench b1_invariant 200 "${b1_args[@]}" --batch-invariant || rc=1
      steps "$out/b1_invariant.log"
      for mode in "" _invariant; do
        bench "mid$mode" 200 throughput "${model_args[@]}" --async-scheduling --num-prompts 256 \
          --input-len 512 --output-len 256 ${mode:+--batch-invariant} || rc=1
        steps "$out/mid$mode.log"
      done ;;
    opbench)
      read -ra args <<< "${OPBENCH:-20}"
      timeout 300 "$root/bin/troupe_cuda_opbench" "${args[@]}" > "$out/opbench.txt" 2>&1 || rc=1
      echo "opbench: $(wc -l < "$out/opbench.txt") lines in opbench.txt" ;;
    *)
      echo "bench.sh: step '$step': allowed: ceilings, latency, long, hf, invariant, opbench"
      exit 2 ;;
  esac
  echo "bench.sh: $step done in $(( $(date +%s) - start )) s"
done
python3 "$here/summary.py" "$out" | tee "$out/summary.md"
exit "$rc"
