#!/usr/bin/env python3
"""HF transformers' generate() on the same model shape as `troupe bench`, for the ratio in
docs/benchmarks.md. Random bf16 weights (no download), random prompt ids, greedy-free
sampling off (do_sample=False is the fastest path HF has), EOS ignored.

    python3 tools/device/hf_generate_bench.py configs/models/llama-3-8b --batch-size 64 \
        --input-len 128 --output-len 128 [--output-json F]
"""
import argparse
import json
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--output-json", default="")
    a = ap.parse_args()

    cfg = AutoConfig.from_pretrained(a.model_dir)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    ids = torch.randint(10, 30000, (a.batch_size, a.input_len), device="cuda")
    mask = torch.ones_like(ids)
    kw = dict(max_new_tokens=a.output_len, min_new_tokens=a.output_len, do_sample=False,
              eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        model.generate(input_ids=ids[:, :8], attention_mask=mask[:, :8], max_new_tokens=4,
                       do_sample=False, pad_token_id=0)  # warm-up
        times = []
        for _ in range(a.iters):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, **kw)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    assert out.shape[1] == a.input_len + a.output_len, out.shape
    best = min(times)
    res = dict(bench="hf_generate", transformers=transformers.__version__, torch=torch.__version__,
               batch_size=a.batch_size, input_len=a.input_len, output_len=a.output_len,
               seconds=times, output_tokens_per_s=a.batch_size * a.output_len / best)
    print(json.dumps(res))
    if a.output_json:
        with open(a.output_json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
