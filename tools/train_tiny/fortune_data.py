"""Reads Debian's fortune files into clean documents and splits them into train / held-out.

Pure standard library on purpose: train.py uses it on the GPU machine, and the tests and
check_outputs.py use it here, where there is no torch.

A fortune file is plain text whose entries are separated by lines holding only "%". Some
entries use typewriter overstrike ("_\bx" for an underlined x, "x\bx" for bold) and a few
hold a bell character; both are undone so the model learns readable text.
"""

from __future__ import annotations

import os
import random
import unicodedata

# The strings the tokenizer reserves; a document that contained one would be split on it.
SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|user|>", "<|assistant|>", "<|system|>"]

SPLIT_SEED = 20240601
HELDOUT_FRACTION = 0.03


def list_fortune_files(data_dir: str) -> list[str]:
    """The fortune text files of data_dir, sorted by name: skips *.dat (strfile indexes),
    *.u8 (links to the same text), hidden files and anything that is not a plain file."""
    if not os.path.isdir(data_dir):
        raise SystemExit(f"data dir {data_dir!r} is not a directory (expected a copy of "
                         "/usr/share/games/fortunes made by prepare_data.sh)")
    names = []
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        if name.startswith(".") or name.endswith((".dat", ".u8")):
            continue
        if not os.path.isfile(path):
            continue
        names.append(path)
    if not names:
        raise SystemExit(f"data dir {data_dir!r} holds no fortune files (only *.dat / *.u8 / dirs?)")
    return names


def clean_text(text: str) -> str:
    """Undoes overstrike, drops control characters other than newline and tab, strips
    trailing spaces of every line and blank lines at both ends."""
    out: list[str] = []
    for ch in text:
        if ch == "\b":
            # Overstrike: the next character is printed over the previous one; keep the later.
            if out and out[-1] != "\n":
                out.pop()
            continue
        if ch in "\n\t":
            out.append(ch)
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            continue
        out.append(ch)
    lines = [line.rstrip() for line in "".join(out).split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def split_fortunes(text: str) -> list[str]:
    """The raw entries of one fortune file (a line holding only '%' ends an entry)."""
    entries: list[str] = []
    current: list[str] = []
    for line in text.split("\n"):
        if line.rstrip("\r") == "%":
            entries.append("\n".join(current))
            current = []
        else:
            current.append(line)
    entries.append("\n".join(current))
    return entries


def read_file_text(path: str) -> str:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # Older fortune files were Latin-1; the Debian ones are UTF-8, so this is a fallback only.
        print(f"note: {path} is not UTF-8, reading it as Latin-1", flush=True)
        return raw.decode("latin-1")


def load_fortunes(data_dir: str) -> list[str]:
    """All distinct, non-empty, cleaned fortunes of data_dir, in file order then entry order.
    Exact duplicates are dropped (first kept) so that none sits in both train and held-out."""
    seen: set[str] = set()
    docs: list[str] = []
    for path in list_fortune_files(data_dir):
        for entry in split_fortunes(read_file_text(path)):
            doc = clean_text(entry)
            if not doc or doc in seen:
                continue
            if any(tok in doc for tok in SPECIAL_TOKENS):
                continue
            seen.add(doc)
            docs.append(doc)
    return docs


def split_train_heldout(docs: list[str], seed: int = SPLIT_SEED,
                        fraction: float = HELDOUT_FRACTION) -> tuple[list[str], list[str]]:
    """Deterministic split: a seeded shuffle (Python's Mersenne Twister shuffle is stable
    across Python versions), the first round(fraction * n) documents are held out."""
    if not docs:
        raise SystemExit("no fortunes to split")
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n_heldout = max(1, round(fraction * len(docs)))
    heldout = [docs[i] for i in order[:n_heldout]]
    train = [docs[i] for i in order[n_heldout:]]
    return train, heldout


def write_fortune_file(path: str, docs: list[str]) -> None:
    """Writes docs in fortune format (entries separated by '%' lines)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n%\n".join(docs))
        f.write("\n%\n")
