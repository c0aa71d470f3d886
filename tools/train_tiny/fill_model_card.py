#!/usr/bin/env python3
"""Fills the model card template from eval.json (python3 standard library only).

    python3 tools/train_tiny/fill_model_card.py OUT_DIR [TEMPLATE]

Reads OUT_DIR/troupe-fortunes/eval.json and TEMPLATE (default: models/troupe-fortunes/README.md
of this checkout), replaces every {{NAME}} and writes OUT_DIR/troupe-fortunes/README.md.
Fails, writing nothing, when eval.json lacks a value or a placeholder stays unfilled.
"""

from __future__ import annotations

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TEMPLATE = os.path.join(HERE, "..", "..", "models", "troupe-fortunes", "README.md")
SHOWN_PER_PROMPT = 3


class MissingValue(Exception):
    pass


def need(ev: dict, *path: str):
    value = ev
    for key in path:
        if not isinstance(value, dict) or value.get(key) is None:
            raise MissingValue(f"eval.json has no {'.'.join(path)}")
        value = value[key]
    return value


def samples_markdown(ev: dict) -> str:
    blocks = []
    for entry in need(ev, "samples", "prompts"):
        prompt = entry["prompt"]
        blocks.append(f"**{prompt}**\n")
        for text in entry["continuations"][:SHOWN_PER_PROMPT]:
            body = (prompt + text).replace("```", "'''").rstrip()
            blocks.append(f"```text\n{body}\n```\n")
    return "\n".join(blocks).rstrip()


def search_table(ev: dict) -> str:
    rows = []
    for r in need(ev, "search"):
        rows.append(f"| {r['name']} | {r['epochs']} | {r['lr']:g} | {r['weight_decay']:g} | "
                    f"{r['best_val_loss']:.4f} | {r['best_epoch']:.2f} | {r['seconds']:.1f} |")
    return "\n".join(rows)


def values(ev: dict) -> dict[str, str]:
    versions = need(ev, "versions")
    return {
        "NUM_PARAMETERS": f"{need(ev, 'num_parameters'):,}",
        "NUM_FORTUNES": f"{need(ev, 'data', 'fortunes'):,}",
        "NUM_HELDOUT": f"{need(ev, 'data', 'heldout'):,}",
        "TRAIN_STREAM_TOKENS": f"{need(ev, 'data', 'train_stream_tokens'):,}",
        "TRAIN_SECONDS": f"{need(ev, 'train_seconds'):.0f}",
        "GPU": str(versions.get("gpu") or "GPU"),
        "SEARCH_TABLE": search_table(ev),
        "BEST_RUN": str(need(ev, "best_run", "name")),
        "BEST_EPOCH": f"{need(ev, 'best_run', 'epoch'):.2f}",
        "TRAIN_TOKENS_SEEN": f"{need(ev, 'train_tokens_seen'):,}",
        "PERPLEXITY": f"{need(ev, 'perplexity'):.2f}",
        "TOTAL_PREDICTED": f"{need(ev, 'total_predicted'):,}",
        "SAMPLES": samples_markdown(ev),
        "VERSIONS": ", ".join(f"{k} {v}" for k, v in versions.items() if k != "gpu" and v),
    }


def fill(template: str, ev: dict) -> str:
    # The template's own note on how to fill it does not belong in the finished card.
    template = re.sub(r"<!-- Model card TEMPLATE.*?-->\n*", "", template, flags=re.S)
    vals = values(ev)
    out = re.sub(r"\{\{([A-Z_]+)\}\}", lambda m: vals.get(m.group(1), m.group(0)), template)
    left = sorted(set(re.findall(r"\{\{([A-Z_]+)\}\}", out)))
    if left:
        raise MissingValue(f"placeholders without a value: {', '.join(left)}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__)
        return 2
    out_dir = argv[0]
    template_path = argv[1] if len(argv) == 2 else DEFAULT_TEMPLATE
    eval_path = os.path.join(out_dir, "troupe-fortunes", "eval.json")
    try:
        with open(eval_path, encoding="utf-8") as f:
            ev = json.load(f)
        with open(template_path, encoding="utf-8") as f:
            template = f.read()
        card = fill(template, ev)
    except (OSError, ValueError, MissingValue, KeyError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    dest = os.path.join(out_dir, "troupe-fortunes", "README.md")
    with open(dest, "w", encoding="utf-8") as f:
        f.write(card)
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
