#!/usr/bin/env bash
# One device call (about 3 minutes of an H200, .carry/cuda carried; bundle_cuda_tests.sh here
# first): the issue's HF ratio in one run on one machine: HF transformers' generate() at batch
# 64, 128 in / 128 out (hf_generate_bench.py, best of two), then troupe bench throughput on
# the same 64 prompts x 128 / 128 (--async-scheduling) twice, and the ratio of the best of each.
source "$(dirname "$0")/env.sh"
session_init unpack
timeout 240 python3 "$here/hf_generate_bench.py" configs/models/llama-3-8b --batch-size 64 \
  --input-len 128 --output-len 128 --output-json "$out/hf.json" 2>&1 | tail -n 1
for i in 1 2; do
  timeout 120 "$root/bin/troupe" --log-level warn bench throughput "${model_args[@]}" \
    --num-prompts 64 --input-len 128 --output-len 128 --async-scheduling \
    --output-json "$out/troupe_64_$i.json" > /dev/null 2>&1
  echo "troupe 64 x 128/128, run $i: $(field "$out/troupe_64_$i.json" output_tokens_per_s) tok/s"
done
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
hf = json.load(open(f"{d}/hf.json"))["output_tokens_per_s"]
ours = max(json.load(open(f"{d}/troupe_64_{i}.json"))["output_tokens_per_s"] for i in (1, 2))
print(f"HF generate {hf:.1f} tok/s, troupe {ours:.1f} tok/s: {ours / hf:.2f}x")
PY
