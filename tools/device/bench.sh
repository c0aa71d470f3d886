#!/usr/bin/env bash
# The benchmarks of docs/benchmarks.md, on the GPU machine (after gpu_check.sh unpacked the
# bundle into /tmp/troupe_cuda). Llama-3-8B shape, bf16, dummy weights; JSON into $OUT.
#   BENCH_QUICK=1 for short runs.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
source "$(dirname "$0")/env.sh"
T="$root/bin/troupe --log-level warn"
M=configs/models/llama-3-8b
common="--model $M --load-format dummy --dtype bfloat16 --max-model-len 4096"
echo "=== bench latency: batch 1, 128 in, 128 out ==="
timeout 240 $T bench latency $common --batch-size 1 --input-len 128 --output-len 128 \
  --num-iters-warmup 1 --num-iters 3 --output-json "$out/latency_b1.json"
echo "=== bench latency: batch 1, 128 in, 128 out, --enforce-eager (no CUDA graphs) ==="
timeout 240 $T bench latency $common --enforce-eager --batch-size 1 --input-len 128 \
  --output-len 128 --num-iters-warmup 1 --num-iters 3 --output-json "$out/latency_b1_eager.json"
echo "=== bench throughput: 64 prompts, 128 in, 128 out (the HF comparison's shape) ==="
timeout 240 $T bench throughput $common --num-prompts 64 --input-len 128 --output-len 128 \
  --output-json "$out/throughput_64.json"
echo "=== bench throughput: ${BENCH_PROMPTS:-256} prompts, ${BENCH_IN:-512} in, ${BENCH_OUT:-256} out ==="
timeout 300 $T bench throughput $common --num-prompts "${BENCH_PROMPTS:-256}" \
  --input-len "${BENCH_IN:-512}" --output-len "${BENCH_OUT:-256}" --output-json "$out/throughput.json"
echo "=== HF transformers generate, batch 64, 128 in, 128 out ==="
timeout 240 python3 tools/device/hf_generate_bench.py $M --batch-size 64 --input-len 128 \
  --output-len 128 --output-json "$out/hf_b64.json"
