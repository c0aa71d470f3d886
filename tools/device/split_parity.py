#!/usr/bin/env python3
"""Greedy token parity of a split model (TP or PP) against one rank, for parallel.sh and tp2.sh.

    split_parity.py prompts FILE SEED BASE_LEN LEN_STEP MAX_TOKENS
        16 random token-id prompts (BASE_LEN + LEN_STEP * i tokens), greedy, ignore_eos and two
        logprobs per token, as `troupe generate --input` lines
    split_parity.py compare ONE_RANK.jsonl SPLIT.jsonl LABEL
        how many sequences are identical, and for each other one its first difference with
        one rank's top-2 logprobs there (a near-tie or not); exit 1 unless all are identical
"""
import json
import random
import sys


def prompts(path, seed, base, step, max_tokens):
    random.seed(int(seed))
    with open(path, "w") as f:
        for i in range(16):
            ids = [random.randrange(1000, 120000) for _ in range(int(base) + int(step) * i)]
            f.write(json.dumps({"prompt_token_ids": ids, "max_tokens": int(max_tokens),
                                "temperature": 0, "ignore_eos": True, "logprobs": 2}) + "\n")


def compare(one, split, label):
    def load(p):
        return [json.loads(l)["outputs"][0] for l in open(p) if l.strip()]
    a, b = load(one), load(split)
    same = sum(x["token_ids"] == y["token_ids"] for x, y in zip(a, b))
    print(f"{label}: {same} of {len(a)} sequences identical ({len(b)} returned)")
    for i, (x, y) in enumerate(zip(a, b)):
        if x["token_ids"] != y["token_ids"]:
            n = min(len(x["token_ids"]), len(y["token_ids"]))
            k = next((j for j in range(n) if x["token_ids"][j] != y["token_ids"][j]), n)
            top = x["logprobs"][k] if x.get("logprobs") and k < len(x["logprobs"]) else None
            print(f"  prompt {i}: first difference at token {k}; one rank's top-2 there: {top}")
    return len(a) == len(b) == 16 and same == 16


if __name__ == "__main__":
    if sys.argv[1] == "prompts":
        prompts(*sys.argv[2:7])
    else:
        sys.exit(0 if compare(*sys.argv[2:5]) else 1)
