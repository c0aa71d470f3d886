"""A stand-in for the parts of Hugging Face `transformers` that train.py uses, for the CPU
smoke test only (this machine has no transformers). The "Llama" here is a tiny causal
model (embedding, one causal-mean mixing layer, RMSNorm, tied output) so a run takes
seconds; it keeps the interface train.py relies on: forward(input_ids=, use_cache=) ->
.logits, tied embeddings, save_pretrained / from_pretrained(dtype=, attn_implementation=)
writing real safetensors (bf16), generate(), GenerationConfig, AutoConfig, AutoTokenizer.
"""

from __future__ import annotations

import json
import os
import struct
import types

import torch
import torch.nn.functional as F

__version__ = "0.0-fake"
FAKE_WIDTH = 16
_DTYPES = {torch.float32: ("F32", 4), torch.bfloat16: ("BF16", 2)}


class LlamaConfig:
    def __init__(self, **kwargs) -> None:
        kwargs.pop("attention_dropout", None)
        kwargs.pop("rope_theta", None)
        self.rope_parameters = kwargs.pop("rope_parameters", {"rope_type": "default", "rope_theta": 10000.0})
        for k, v in kwargs.items():
            setattr(self, k, v)

    def to_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    @classmethod
    def from_pretrained(cls, model_dir: str) -> "LlamaConfig":
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        for k in ("architectures", "model_type", "dtype", "torch_dtype", "transformers_version"):
            cfg.pop(k, None)
        return cls(**cfg)


class AutoConfig(LlamaConfig):
    pass


class GenerationConfig:
    def __init__(self, **kwargs) -> None:
        self.values = kwargs

    def save_pretrained(self, model_dir: str) -> None:
        with open(os.path.join(model_dir, "generation_config.json"), "w", encoding="utf-8") as f:
            json.dump(self.values, f, indent=2)


class _Out:
    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits


class _Norm(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


class LlamaForCausalLM(torch.nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(config.vocab_size, FAKE_WIDTH)
        layer = torch.nn.Module()
        layer.mlp = torch.nn.Module()
        layer.mlp.down_proj = torch.nn.Linear(FAKE_WIDTH, FAKE_WIDTH, bias=False)
        self.model.layers = torch.nn.ModuleList([layer])
        self.model.norm = _Norm(FAKE_WIDTH)
        self.lm_head = torch.nn.Linear(FAKE_WIDTH, config.vocab_size, bias=False)
        self.generation_config = None
        self.tie_weights()

    def tie_weights(self) -> None:
        self.lm_head.weight = self.model.embed_tokens.weight

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, use_cache=None, attention_mask=None):
        x = self.model.embed_tokens(input_ids)                         # [B, T, D]
        steps = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)[None, :, None]
        mixed = x.cumsum(dim=1) / steps                                 # causal mean
        x = x + self.model.layers[0].mlp.down_proj(F.silu(mixed))
        return _Out(self.lm_head(self.model.norm(x)))

    # -- files
    def save_pretrained(self, model_dir: str) -> None:
        os.makedirs(model_dir, exist_ok=True)
        dtype = next(self.parameters()).dtype
        cfg = self.config.to_dict()
        cfg.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                    "dtype": "bfloat16" if dtype == torch.bfloat16 else "float32"})
        with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, indent=2)
        tensors = {k: v for k, v in self.state_dict().items() if k != "lm_head.weight"}
        header, blobs, offset = {}, [], 0
        for name, t in tensors.items():
            code, width = _DTYPES[t.dtype]
            raw = t.detach().contiguous().view(torch.int16 if width == 2 else torch.int32).numpy().tobytes()
            header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
            blobs.append(raw)
            offset += len(raw)
        head = json.dumps(header).encode()
        with open(os.path.join(model_dir, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            for raw in blobs:
                f.write(raw)
        if self.generation_config is not None:
            self.generation_config.save_pretrained(model_dir)

    @classmethod
    def from_pretrained(cls, model_dir: str, dtype=None, attn_implementation=None) -> "LlamaForCausalLM":
        assert attn_implementation == "eager"
        model = cls(LlamaConfig.from_pretrained(model_dir))
        with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            data = f.read()
        state = {}
        for name, meta in header.items():
            a, b = meta["data_offsets"]
            buf = bytearray(data[a:b])
            if meta["dtype"] == "BF16":
                t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16)
            else:
                t = torch.frombuffer(buf, dtype=torch.float32)
            state[name] = t.reshape(meta["shape"]).to(dtype)
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
        model.load_state_dict(state)
        model.tie_weights()
        return model.to(dtype)

    # -- generation
    @torch.no_grad()
    def generate(self, input_ids, attention_mask=None, do_sample=False, temperature=1.0, top_p=1.0,
                 max_new_tokens=20, num_return_sequences=1, bos_token_id=None, eos_token_id=None,
                 pad_token_id=None):
        seqs = input_ids.repeat(num_return_sequences, 1)
        done = torch.zeros(seqs.shape[0], dtype=torch.bool, device=seqs.device)
        for _ in range(max_new_tokens):
            logits = self.forward(input_ids=seqs).logits[:, -1].float()
            if do_sample:
                probs = torch.softmax(logits / temperature, dim=-1)
                sorted_p, idx = probs.sort(dim=-1, descending=True)
                keep = sorted_p.cumsum(-1) - sorted_p < top_p
                sorted_p = sorted_p * keep
                pick = torch.multinomial(sorted_p / sorted_p.sum(-1, keepdim=True), 1)
                nxt = idx.gather(1, pick)[:, 0]
            else:
                nxt = logits.argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, pad_token_id), nxt)
            seqs = torch.cat([seqs, nxt[:, None]], dim=1)
            done |= nxt == eos_token_id
            if bool(done.all()):
                break
        return seqs


class _HfTokenizer:
    def __init__(self, model_dir: str) -> None:
        import tokenizers

        self.tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            self.cfg = json.load(f)

    def __call__(self, text: str) -> dict:
        return {"input_ids": self.tok.encode(text, add_special_tokens=self.cfg["add_bos_token"]).ids}

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        import jinja2

        template = jinja2.Environment().from_string(self.cfg["chat_template"])
        return template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                               bos_token=self.cfg["bos_token"], eos_token=self.cfg["eos_token"])


AutoTokenizer = types.SimpleNamespace(from_pretrained=_HfTokenizer)
