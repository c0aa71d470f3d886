#!/usr/bin/env python3
"""Writes the tokenizer.json seeds of the tokenizer_json fuzz target (corpus/tokenizer_json)
from the real Qwen3 and DeepSeek V3 files (tools/tokenizer_reference/fetch_tokenizers.sh):
each keeps its file's normalizer, pre-tokenizer, post-processor, decoder, model options and
some added tokens, with the vocabulary cut to printable ASCII (and a few Latin-1 byte symbols)
plus the tokens of the first merges that build only on those, renumbered densely so a seed
stays a few KB. Usage: make_tokenizer_seeds.py TOKENIZERS_DIR OUT_DIR
"""
import json
import os
import sys

# Byte-level symbols: printable ASCII stands for itself; space, newline and tab are Ġ, Ċ, ĉ;
# Ã and © are the two bytes of "é".
BASE = [chr(c) for c in range(0x21, 0x7F)] + ["Ġ", "Ċ", "ĉ", "Ã", "©"]


def trim(src, merges_kept, added_kept):
    t = json.load(open(src, encoding="utf-8"))
    model = t["model"]
    vocab = model["vocab"]
    keep = [tok for tok in BASE if tok in vocab]
    have = set(keep)
    merges = []
    for m in model["merges"]:
        left, right = m if isinstance(m, list) else m.split(" ")
        if left in have and right in have and left + right in vocab:
            merges.append(m)
            if left + right not in have:
                have.add(left + right)
                keep.append(left + right)
            if len(merges) == merges_kept:
                break
    model["vocab"] = {tok: i for i, tok in enumerate(keep)}
    model["merges"] = merges
    added = [a for a in t["added_tokens"] if a["content"] in added_kept]
    for i, a in enumerate(added):
        a["id"] = len(keep) + i
    t["added_tokens"] = added
    return t


def write(t, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False, separators=(",", ":"))


def main():
    src, out = sys.argv[1], sys.argv[2]
    qwen = trim(os.path.join(src, "qwen3/tokenizer.json"), 60,
                {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"})
    write(qwen, os.path.join(out, "qwen3_trimmed.json"))
    deepseek = trim(os.path.join(src, "deepseek_v3/tokenizer.json"), 40,
                    {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>"})
    write(deepseek, os.path.join(out, "deepseek_v3_trimmed.json"))


if __name__ == "__main__":
    main()
