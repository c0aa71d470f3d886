"""A stand-in for the parts of Hugging Face `tokenizers` that train.py uses, for the CPU
smoke test only (this machine has no `tokenizers`).

It is a byte-level BPE with no merges: every byte is one token. It saves a tokenizer.json
in the real format (ByteLevel pre-tokenizer and decoder, BPE model, TemplateProcessing),
padded with unused tokens to the requested vocabulary size, so check_outputs.py can read it.
"""

from __future__ import annotations

import json
import types


def _byte_symbols() -> list[str]:
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


BYTE_SYMBOLS = _byte_symbols()


class _BPE:
    def __init__(self, *args, **kwargs) -> None:
        pass


class _ByteLevelPre:
    def __init__(self, add_prefix_space: bool = True, trim_offsets: bool = True, use_regex: bool = True) -> None:
        self.add_prefix_space = add_prefix_space
        self.use_regex = use_regex

    @staticmethod
    def alphabet() -> list[str]:
        return list(BYTE_SYMBOLS)


class _ByteLevelDecoder:
    pass


class _Template:
    def __init__(self, single=None, pair=None, special_tokens=None) -> None:
        self.single = single
        self.special_tokens = special_tokens


class _BpeTrainer:
    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs


class _Encoding:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids


class Tokenizer:
    def __init__(self, model) -> None:
        self.model = model
        self.pre_tokenizer = None
        self.decoder = None
        self.post_processor = None
        self.specials: list[str] = []
        self.vocab_size = 0

    # -- training
    def train_from_iterator(self, iterator, trainer=None, length=None) -> None:
        for _ in iterator:
            pass
        self.specials = list(trainer.kwargs["special_tokens"])
        self.vocab_size = trainer.kwargs["vocab_size"]

    # -- vocabulary
    def _vocab(self) -> dict[str, int]:
        vocab = {t: i for i, t in enumerate(self.specials)}
        for s in BYTE_SYMBOLS:
            vocab[s] = len(vocab)
        k = 0
        while len(vocab) < self.vocab_size:
            vocab[f"<|unused_{k}|>"] = len(vocab)
            k += 1
        return vocab

    def token_to_id(self, token: str):
        return self._vocab().get(token)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return len(self._vocab())

    # -- encoding
    def _bos(self) -> list[int]:
        if self.post_processor is None:
            return []
        return [i for _, i in self.post_processor.special_tokens]

    def encode(self, sequence: str, pair=None, is_pretokenized: bool = False,
               add_special_tokens: bool = True) -> _Encoding:
        base = len(self.specials)
        ids = [base + b for b in sequence.encode("utf-8")]
        return _Encoding((self._bos() if add_special_tokens else []) + ids)

    def encode_batch(self, input, is_pretokenized: bool = False, add_special_tokens: bool = True):
        return [self.encode(t, add_special_tokens=add_special_tokens) for t in input]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        base = len(self.specials)
        raw = bytearray()
        for i in ids:
            if i < base:
                if not skip_special_tokens:
                    raw.extend(self.specials[i].encode())
            elif i < base + 256:
                raw.append(i - base)
        return raw.decode("utf-8", errors="replace")

    def decode_batch(self, sequences, skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(s, skip_special_tokens) for s in sequences]

    # -- files
    def save(self, path: str, pretty: bool = True) -> None:
        bos, bos_id = self.post_processor.special_tokens[0]
        obj = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for i, t in enumerate(self.specials)],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": self.pre_tokenizer.add_prefix_space,
                              "trim_offsets": True, "use_regex": self.pre_tokenizer.use_regex},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
            },
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": self._vocab(), "merges": []},
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=2 if pretty else None)

    @staticmethod
    def from_file(path: str) -> "Tokenizer":
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
        tok = Tokenizer(_BPE())
        tok.specials = [t["content"] for t in sorted(obj["added_tokens"], key=lambda t: t["id"])]
        tok.vocab_size = len(obj["model"]["vocab"])
        pre = obj["pre_tokenizer"]
        tok.pre_tokenizer = _ByteLevelPre(pre["add_prefix_space"], use_regex=pre["use_regex"])
        tok.decoder = _ByteLevelDecoder()
        specials = obj["post_processor"]["special_tokens"]
        tok.post_processor = _Template(special_tokens=[(k, v["ids"][0]) for k, v in specials.items()])
        return tok


models = types.SimpleNamespace(BPE=_BPE)
pre_tokenizers = types.SimpleNamespace(ByteLevel=_ByteLevelPre)
decoders = types.SimpleNamespace(ByteLevel=_ByteLevelDecoder)
processors = types.SimpleNamespace(TemplateProcessing=_Template)
trainers = types.SimpleNamespace(BpeTrainer=_BpeTrainer)
__version__ = "0.0-fake"
