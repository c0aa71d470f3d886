#!/usr/bin/env python3
"""How far transformers itself lands from its float32 references when it runs the parity
fixtures in bfloat16 and float16: the yardstick for troupe's half-precision parity test.

    python3 tools/half_precision_refs.py tests/fixtures/models   # on the GPU machine

The fixtures (tools/make_fixtures.py) have large random weights (std 0.2) so that greedy paths
have clear margins in float32; that also makes their logits sensitive to rounding, so a fixed
tolerance for half precision says little unless it is set against what the reference
implementation itself does in that precision. For each fixture folder holding reference.json,
this loads the checkpoint in each half dtype (eager attention, on cuda), recomputes the same
logits as reference.json (every prompt's last position, every position of the full-logits
prompt) and writes half_precision.json beside it:

    {"transformers_version": ..., "torch_version": ..., "device": "cuda",
     "bfloat16": {"last": [rel error per prompt], "full": [rel error per position]},
     "float16":  {...}}

where rel error = ||logits_half - logits_f32_reference|| / ||logits_f32_reference||, the same
measure tests/models/parity.hpp uses.
"""

import argparse
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM


def rel_error(a, ref):
    ref = torch.tensor(ref, dtype=torch.float64)
    return float(torch.linalg.vector_norm(a.double().cpu() - ref) / torch.linalg.vector_norm(ref))


@torch.no_grad()
def errors(folder, dtype, device):
    with open(os.path.join(folder, "reference.json")) as f:
        ref = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
    model = model.to(device).eval()
    last, full = [], []
    for i, p in enumerate(ref["prompts"]):
        x = torch.tensor([p["token_ids"]], dtype=torch.long, device=device)
        logits = model(input_ids=x).logits[0].float()
        last.append(rel_error(logits[-1], p["last_logits"]))
        if i == ref["full_logits_prompt_index"]:
            full = [rel_error(logits[t], row) for t, row in enumerate(ref["full_logits"])]
    return {"last": [float(f"{e:.6g}") for e in last], "full": [float(f"{e:.6g}") for e in full]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fixtures_dir")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for name in sorted(os.listdir(args.fixtures_dir)):
        folder = os.path.join(args.fixtures_dir, name)
        if not os.path.isfile(os.path.join(folder, "reference.json")):
            continue
        out = dict(transformers_version=transformers.__version__, torch_version=torch.__version__,
                   device=str(device))
        for dtype in (torch.bfloat16, torch.float16):
            out[str(dtype).replace("torch.", "")] = errors(folder, dtype, device)
        with open(os.path.join(folder, "half_precision.json"), "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print(name, json.dumps(out), file=sys.stderr)


if __name__ == "__main__":
    main()
