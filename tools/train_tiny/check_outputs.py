#!/usr/bin/env python3
"""Sanity checks of what train.py produced, with python3 and the standard library only.

    python3 tools/train_tiny/check_outputs.py OUT_DIR

Checks OUT_DIR/troupe-fortunes/ (file sizes, the safetensors header against config.json,
the keys of every JSON file, eval.json's sums and perplexity) and OUT_DIR/heldout.txt, and
re-tokenizes the evaluated fortunes with an independent byte-level BPE written here from
tokenizer.json, which must give eval.json's token ids. Prints one line per check and a
closing 'N passed, M failed'; exits 1 when something failed.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import unicodedata

MODEL_NAME = "troupe-fortunes"
SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|user|>", "<|assistant|>", "<|system|>"]
EXPECTED_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "generation_config.json", "eval.json"]
MAX_MODEL_BYTES = 12 * 1024 * 1024
EVAL_DOCS = 64
PROMPTS = ["The future of AI is", "Once upon a time", "A wise man"]


# ----------------------------------------------------------------------------- byte-level BPE


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table: printable Latin-1 bytes stand
    for themselves, the 68 others take the code points from 256 upward in byte order."""
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _is_letter(ch: str) -> bool:
    return unicodedata.category(ch).startswith("L")


def _is_number(ch: str) -> bool:
    return unicodedata.category(ch).startswith("N")


def _is_space(ch: str) -> bool:
    return ch.isspace()


def _is_other(ch: str) -> bool:
    return not (_is_space(ch) or _is_letter(ch) or _is_number(ch))


CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


def gpt2_split(text: str) -> list[str]:
    """The pieces of GPT-2's pre-tokenizer regex
    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
    as a hand-written scanner (Python's re has no \\p{L})."""
    pieces = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "'":
            hit = next((s for s in CONTRACTIONS if text.startswith(s, i + 1)), None)
            if hit is not None:
                pieces.append(text[i:i + 1 + len(hit)])
                i += 1 + len(hit)
                continue
        for pred in (_is_letter, _is_number, _is_other):
            if pred(c) or (c == " " and nxt and pred(nxt)):
                j = i + 1 if c == " " else i
                while j < n and pred(text[j]):
                    j += 1
                pieces.append(text[i:j])
                i = j
                break
        else:
            # c is whitespace not glued to what follows: the whole run, except the last
            # character when the run is followed by a non-space and is longer than one.
            j = i
            while j < n and _is_space(text[j]):
                j += 1
            if j < n and j - i >= 2:
                j -= 1
            pieces.append(text[i:j])
            i = j
    return pieces


class ByteLevelBpe:
    def __init__(self, tokenizer_json: dict) -> None:
        model = tokenizer_json["model"]
        self.vocab: dict[str, int] = model["vocab"]
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.ranks: dict[tuple[str, str], int] = {}
        for rank, merge in enumerate(model["merges"]):
            pair = tuple(merge.split(" ", 1)) if isinstance(merge, str) else tuple(merge)
            self.ranks[pair] = rank
        self.added = {t["content"]: t["id"] for t in tokenizer_json.get("added_tokens", [])}
        for content, i in self.added.items():
            self.id_to_token.setdefault(i, content)
        self.byte_map = byte_to_unicode()
        self.char_to_byte = {c: b for b, c in self.byte_map.items()}

    def _bpe(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            best = None
            for k in range(len(parts) - 1):
                r = self.ranks.get((parts[k], parts[k + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, k)
            if best is None:
                break
            k = best[1]
            parts[k:k + 2] = [parts[k] + parts[k + 1]]
        return parts

    def encode(self, text: str, bos_id: int) -> list[int]:
        ids = [bos_id]
        for piece in gpt2_split(text):
            mapped = "".join(self.byte_map[b] for b in piece.encode("utf-8"))
            for token in self._bpe(mapped):
                ids.append(self.vocab[token])
        return ids

    def decode(self, ids: list[int], skip: set[int]) -> str:
        raw = bytearray()
        for i in ids:
            if i in skip:
                continue
            token = self.id_to_token[i]
            if token in self.added:
                raw.extend(token.encode("utf-8"))
            else:
                raw.extend(self.char_to_byte[c] for c in token)
        return raw.decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------- checks


class Checker:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []

    def __call__(self, cond: bool, what: str) -> bool:
        if cond:
            self.passed += 1
            print(f"ok    {what}")
        else:
            self.failed += 1
            self.failures.append(what)
            print(f"FAIL  {what}")
        return bool(cond)


def load_json(check: Checker, path: str):
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
        check(True, f"{os.path.basename(path)} is JSON")
        return obj
    except (OSError, ValueError) as e:
        check(False, f"{path}: {e}")
        return None


def read_safetensors_header(path: str) -> tuple[dict, int]:
    """The JSON header of a safetensors file and its length in bytes."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 10_000_000:
            raise ValueError(f"header length {n} is implausible")
        return json.loads(f.read(n)), n


def expected_shapes(cfg: dict) -> dict[str, list[int]]:
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv, inter = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["intermediate_size"]
    shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
            p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
            p + "mlp.down_proj.weight": [h, inter],
        })
    if not cfg.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = [v, h]
    return shapes


def check_model_files(check: Checker, mdir: str) -> tuple[dict | None, int | None]:
    for name in EXPECTED_FILES:
        check(os.path.isfile(os.path.join(mdir, name)), f"{MODEL_NAME}/{name} exists")
    total = sum(os.path.getsize(os.path.join(mdir, n)) for n in os.listdir(mdir)
                if os.path.isfile(os.path.join(mdir, n)))
    check(total < MAX_MODEL_BYTES + 2 * 1024 * 1024, f"checkpoint folder is {total / 1e6:.2f} MB")

    cfg = load_json(check, os.path.join(mdir, "config.json"))
    if cfg is not None:
        check(cfg.get("architectures") == ["LlamaForCausalLM"], f"config architectures {cfg.get('architectures')}")
        check(cfg.get("model_type") == "llama", f"config model_type {cfg.get('model_type')}")
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
                    "rms_norm_eps", "tie_word_embeddings", "bos_token_id", "eos_token_id"):
            check(key in cfg, f"config has {key} = {cfg.get(key)!r}")
        theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))
        check(theta == 10000.0, f"config rope_theta {theta}")
        check(cfg.get("tie_word_embeddings") is True, "config tie_word_embeddings is true")
        check(cfg.get("vocab_size") == 4096, f"config vocab_size {cfg.get('vocab_size')}")
        check(cfg.get("dtype", cfg.get("torch_dtype")) == "bfloat16",
              f"config dtype {cfg.get('dtype', cfg.get('torch_dtype'))}")

    n_params = None
    st = os.path.join(mdir, "model.safetensors")
    if os.path.isfile(st):
        size = os.path.getsize(st)
        check(1_000_000 < size < MAX_MODEL_BYTES, f"model.safetensors is {size / 1e6:.2f} MB (< 12 MiB)")
        try:
            header, header_len = read_safetensors_header(st)
            tensors = {k: v for k, v in header.items() if k != "__metadata__"}
            dtypes = {v["dtype"] for v in tensors.values()}
            check(dtypes == {"BF16"}, f"safetensors dtypes {sorted(dtypes)}")
            n_params = sum(math.prod(v["shape"]) for v in tensors.values())
            end = max(v["data_offsets"][1] for v in tensors.values())
            check(8 + header_len + end == size, f"safetensors data ends at the end of the file ({size} bytes)")
            bad_len = [k for k, v in tensors.items()
                       if v["data_offsets"][1] - v["data_offsets"][0] != 2 * math.prod(v["shape"])]
            check(not bad_len, f"every tensor holds 2 bytes per element{(' (bad: ' + bad_len[0] + ')') if bad_len else ''}")
            if cfg is not None and "hidden_size" in cfg:
                want = expected_shapes(cfg)
                check(set(tensors) == set(want),
                      f"safetensors tensor names match config (extra {sorted(set(tensors) - set(want))[:3]}, "
                      f"missing {sorted(set(want) - set(tensors))[:3]})")
                bad = [k for k in want if k in tensors and tensors[k]["shape"] != want[k]]
                check(not bad, f"safetensors shapes match config{(' (bad: ' + bad[0] + ')') if bad else ''}")
        except (OSError, ValueError, KeyError) as e:
            check(False, f"safetensors header: {e}")

    gen = load_json(check, os.path.join(mdir, "generation_config.json"))
    if gen is not None:
        check(gen.get("bos_token_id") == 0 and gen.get("eos_token_id") == 1,
              f"generation_config bos/eos {gen.get('bos_token_id')}/{gen.get('eos_token_id')}")
        check(gen.get("do_sample") is True and gen.get("temperature") == 0.8 and gen.get("top_p") == 0.95
              and gen.get("max_new_tokens") == 64, "generation_config sampling settings")

    tcfg = load_json(check, os.path.join(mdir, "tokenizer_config.json"))
    if tcfg is not None:
        for key, want in (("bos_token", "<|bos|>"), ("eos_token", "<|eos|>"), ("pad_token", "<|pad|>"),
                          ("add_bos_token", True), ("model_max_length", 512)):
            check(tcfg.get(key) == want, f"tokenizer_config {key} = {tcfg.get(key)!r}")
        tmpl = tcfg.get("chat_template") or ""
        check("<|assistant|>" in tmpl and "messages" in tmpl, "tokenizer_config has a chat_template")
    return cfg, n_params


def check_tokenizer_json(check: Checker, mdir: str) -> ByteLevelBpe | None:
    tj = load_json(check, os.path.join(mdir, "tokenizer.json"))
    if tj is None:
        return None
    pre = tj.get("pre_tokenizer") or {}
    check(pre.get("type") == "ByteLevel" and pre.get("add_prefix_space") is False and pre.get("use_regex", True),
          f"pre_tokenizer {pre}")
    check((tj.get("decoder") or {}).get("type") == "ByteLevel", f"decoder {(tj.get('decoder') or {}).get('type')}")
    check(tj.get("normalizer") is None, f"normalizer {tj.get('normalizer')}")
    model = tj.get("model") or {}
    check(model.get("type") == "BPE", f"model type {model.get('type')}")
    post = tj.get("post_processor") or {}
    check(post.get("type") == "TemplateProcessing", f"post_processor {post.get('type')}")
    single = post.get("single") or []
    check(len(single) == 2 and (single[0].get("SpecialToken") or {}).get("id") == "<|bos|>"
          and "Sequence" in single[1], f"post_processor single template {single}")
    added = {t["content"]: t["id"] for t in tj.get("added_tokens", [])}
    check(all(added.get(t) == i for i, t in enumerate(SPECIAL_TOKENS)), f"special tokens {added}")
    vocab = model.get("vocab") or {}
    check(len(vocab) == 4096, f"vocab has {len(vocab)} entries")
    check(sorted(vocab.values()) == list(range(len(vocab))), "vocab ids are 0..N-1")
    bpe = ByteLevelBpe(tj)
    missing = [c for c in bpe.byte_map.values() if c not in vocab]
    check(not missing, f"all 256 byte symbols are in the vocab ({len(missing)} missing)")
    return bpe


def check_eval(check: Checker, mdir: str, out_dir: str, bpe: ByteLevelBpe | None, n_params: int | None) -> None:
    ev = load_json(check, os.path.join(mdir, "eval.json"))
    if ev is None:
        return
    for key in ("documents", "total_nll", "total_predicted", "perplexity", "train_seconds",
                "train_tokens_seen", "num_parameters", "versions", "samples"):
        check(key in ev, f"eval.json has {key}")
    docs = ev.get("documents") or []
    check(len(docs) == EVAL_DOCS, f"eval.json has {len(docs)} documents")
    total_nll, total_pred, bad = 0.0, 0, []
    for i, d in enumerate(docs):
        ids, nll, n = d.get("token_ids") or [], d.get("nll_sum"), d.get("num_predicted")
        ok = (isinstance(nll, (int, float)) and math.isfinite(nll) and nll >= 0 and n == len(ids) - 1
              and 2 <= len(ids) <= 256 and ids[0] == 0)
        if not ok:
            bad.append(i)
        else:
            total_nll += nll
            total_pred += n
    check(not bad, f"every document has finite nll_sum, num_predicted = len(token_ids) - 1, BOS first"
                   f"{(' (bad: ' + str(bad[:5]) + ')') if bad else ''}")
    ppl = ev.get("perplexity")
    check(isinstance(ppl, (int, float)) and math.isfinite(ppl) and ppl > 1, f"perplexity {ppl} is finite")
    check(ev.get("total_predicted") == total_pred, f"total_predicted {ev.get('total_predicted')} = sum {total_pred}")
    check(isinstance(ev.get("total_nll"), (int, float)) and abs(ev["total_nll"] - total_nll) <= 1e-6 * max(1, total_nll),
          f"total_nll {ev.get('total_nll')} = sum {total_nll}")
    if total_pred and isinstance(ppl, (int, float)):
        want = math.exp(total_nll / total_pred)
        check(abs(ppl - want) <= 1e-6 * want, f"perplexity = exp(total_nll / total_predicted) = {want:.4f}")
        check(ppl < 200, f"perplexity {ppl:.2f} is plausible for a trained model (< 200)")
    if n_params is not None:
        check(ev.get("num_parameters") == n_params, f"num_parameters {ev.get('num_parameters')} = safetensors {n_params}")
    check(isinstance(ev.get("train_seconds"), (int, float)) and ev["train_seconds"] > 0,
          f"train_seconds {ev.get('train_seconds')}")
    samples = (ev.get("samples") or {}).get("prompts") or []
    check([s.get("prompt") for s in samples] == PROMPTS
          and all(len(s.get("continuations") or []) == 8 for s in samples),
          f"samples: 8 continuations for each of {PROMPTS}")

    heldout_path = os.path.join(out_dir, "heldout.txt")
    if check(os.path.isfile(heldout_path), "heldout.txt exists"):
        with open(heldout_path, encoding="utf-8") as f:
            entries = [e.strip("\n") for e in f.read().split("\n%\n")]
        entries = [e for e in entries if e]
        check(len(entries) >= EVAL_DOCS, f"heldout.txt holds {len(entries)} fortunes")
        check([d.get("text") for d in docs] == entries[:EVAL_DOCS],
              "eval.json documents are the first 64 fortunes of heldout.txt")

    if bpe is not None and docs:
        mismatch = []
        for i, d in enumerate(docs):
            mine = bpe.encode(d.get("text", ""), 0)[:256]
            if mine != d.get("token_ids"):
                mismatch.append(i)
        check(not mismatch, "independent byte-level BPE reproduces every document's token_ids"
                            f"{(' (first mismatch: document ' + str(mismatch[0]) + ')') if mismatch else ''}")
        untruncated = [d for d in docs if not d.get("truncated")]
        back = all(bpe.decode(d["token_ids"], {0, 1, 2}) == d["text"] for d in untruncated)
        check(back, "token_ids decode back to the text")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    out_dir = argv[0]
    mdir = os.path.join(out_dir, MODEL_NAME)
    check = Checker()
    if not check(os.path.isdir(mdir), f"{mdir} is a directory"):
        print(f"0 passed, {check.failed} failed")
        return 1
    _, n_params = check_model_files(check, mdir)
    bpe = check_tokenizer_json(check, mdir)
    check_eval(check, mdir, out_dir, bpe, n_params)
    print(f"{check.passed} passed, {check.failed} failed")
    return 0 if check.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
