#!/usr/bin/env python3
"""Writes troupe's model-parity fixtures: tiny random-weight Hugging Face checkpoints and
what transformers computes for them.

    python3 tools/make_fixtures.py OUT_DIR      # then copy OUT_DIR to tests/fixtures/models/

Needs torch, transformers (5.x; 4.4x also works), safetensors. Deterministic: every random
number comes from a CPU torch.Generator seeded per model, so two runs write the same weights
(the references may differ in the last bits between cpu and cuda, which is why the device is
recorded).

Layout written (one folder per model):

    OUT_DIR/llama_gqa/    config.json  model.safetensors                      reference.json
    OUT_DIR/llama3_tied/  config.json  model.safetensors.index.json
                          model-0000K-of-0000N.safetensors (several)          reference.json
    OUT_DIR/qwen2/        config.json  model.safetensors                      reference.json
    OUT_DIR/llama_gelu/   config.json  model.safetensors                      reference.json
    OUT_DIR/qwen3/        config.json  model.safetensors                      reference.json

    python3 tools/make_fixtures.py OUT_DIR --only llama_gelu   # just the named ones

reference.json:
    {
      "name": "llama_gqa", "architecture": "LlamaForCausalLM", "storage_dtype": "float32",
      "torch_version": "...", "transformers_version": "...", "device": "cuda" | "cpu",
      "seed": 1234, "vocab_size": 256, "greedy_new_tokens": 24,
      "prompts": [
        {"token_ids": [...],
         "last_logits": [vocab floats],          # logits at the last prompt position
         "last_margin": top1 - top2 of last_logits,
         "greedy_tokens": [24 ints],             # model.generate, greedy, eos disabled
         "greedy_margins": [24 floats],          # top1 - top2 of the logits choosing each token
         "greedy_min_margin": min(greedy_margins),
         "greedy_recheck_ok": true}              # a full no-cache forward picks the same tokens
        ... (prompt lengths 1, 2, 7, 33, 100)
      ],
      "full_logits_prompt_index": 2,             # the 7-token prompt
      "full_logits": [[vocab floats] x 7]        # logits of every position of that prompt
    }

Logits are float32 values written with 9 significant digits (enough to round-trip a float32).

Beam search references (a "beam" key in reference.json, read by tests/actors/test_beam_search.cpp):

    python3 tools/make_fixtures.py tests/fixtures/models --beam-only   # adds/refreshes only it

reads the checkpoints already in OUT_DIR (no weights are written) and stores what
model.generate(num_beams=...) returns in float32 for the 2- and 7-token prompts:

    "beam": {"transformers_version": "...", "device": "cuda",
             "cases": [{"prompt": [...], "num_beams": 4, "num_return_sequences": 2,
                        "length_penalty": 0.5, "early_stopping": true | false | "never",
                        "eos_token_id": null | int, "max_new_tokens": 12,
                        "sequences": [[new tokens, up to and with the eos], ...],
                        "sequence_scores": [floats, best first]}, ...]}

A case's eos (when not null) is the second token of the prompt's greedy continuation, so that
hypotheses do end early.
"""

import argparse
import json
import math
import os
import shutil
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

PROMPT_LENGTHS = [1, 2, 7, 33, 100]
FULL_LOGITS_PROMPT_INDEX = 2  # the 7-token prompt
NEW_TOKENS = 24
SHARD_BYTES = 40 * 1024

# Weight init (larger than HF's 0.02 so that logits are peaked and greedy paths have margins).
MATRIX_STD = 0.2
EMBED_STD = 0.5
BIAS_STD = 0.2
NORM_STD = 0.2  # norm weights are 1 + NORM_STD * N(0, 1)

# name, class, config class, storage dtype, seed, config kwargs
MODELS = [
    dict(
        name="llama_gqa",
        model_cls=LlamaForCausalLM,
        config_cls=LlamaConfig,
        storage=torch.float32,
        seed=1001,
        shard=False,
        old_dtype_key=False,
        config=dict(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=512,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            hidden_act="silu",
            attention_bias=False,
            mlp_bias=False,
        ),
        rope=dict(rope_type="default", rope_theta=10000.0),
    ),
    dict(
        name="llama3_tied",
        model_cls=LlamaForCausalLM,
        config_cls=LlamaConfig,
        storage=torch.bfloat16,
        seed=2002,
        shard=True,
        old_dtype_key=True,
        config=dict(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            max_position_embeddings=512,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            hidden_act="silu",
            attention_bias=False,
            mlp_bias=False,
        ),
        # original_max_position_embeddings 32: wavelengths of this head_dim straddle 32/4 and
        # 32/1, so the high (unchanged), medium (smoothed) and low (/factor) bands all occur.
        rope=dict(
            rope_type="llama3",
            rope_theta=10000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=32,
        ),
    ),
    dict(
        name="qwen2",
        model_cls=Qwen2ForCausalLM,
        config_cls=Qwen2Config,
        storage=torch.float16,
        seed=3003,
        shard=False,
        old_dtype_key=False,
        config=dict(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            hidden_act="silu",
            use_sliding_window=False,
        ),
        rope=dict(rope_type="default", rope_theta=1000000.0),
    ),
]

# Qwen3: qwen2's shapes with an RMSNorm over each q and k head (q_norm, k_norm) before RoPE, no
# biases, a head_dim (32) whose heads span more than hidden_size (4 x 32 = 128 > 64), bfloat16
# as Qwen3 ships.
MODELS.append(dict(MODELS[2], name="qwen3", model_cls=Qwen3ForCausalLM, config_cls=Qwen3Config,
                   storage=torch.bfloat16, seed=5005,
                   config=dict(MODELS[2]["config"], head_dim=32, attention_bias=False)))

# A gated-GELU (GeGLU) Llama: llama_gqa's shapes with hidden_act gelu_pytorch_tanh (the tanh
# approximation) and one KV head (MQA).
MODELS.append(dict(MODELS[0], name="llama_gelu", seed=4004,
                   config=dict(MODELS[0]["config"], num_key_value_heads=1,
                               hidden_act="gelu_pytorch_tanh")))


def log(msg):
    print(msg, flush=True)


def make_config(spec):
    """Builds the config with no bos/eos/pad (so generation never stops or masks a token).

    transformers 5 takes the RoPE settings as `rope_parameters` (rope_theta inside); 4.x takes
    `rope_theta` + `rope_scaling`."""
    common = dict(spec["config"])
    common.update(bos_token_id=None, eos_token_id=None, pad_token_id=None, initializer_range=MATRIX_STD)
    rope = dict(spec["rope"])
    if int(transformers.__version__.split(".")[0]) >= 5:
        cfg = spec["config_cls"](**common, rope_parameters=dict(rope))
        params = cfg.rope_parameters
        for k, v in rope.items():
            if params.get(k) != v:
                raise SystemExit(f"{spec['name']}: rope_parameters[{k!r}] is {params.get(k)!r}, wanted {v!r}")
    else:
        theta = rope.pop("rope_theta")
        scaling = None if rope["rope_type"] == "default" else rope
        cfg = spec["config_cls"](**common, rope_theta=theta, rope_scaling=scaling)
    # The loaded config must say what we asked for; a silent default would make a bad fixture.
    for k, v in spec["config"].items():
        got = getattr(cfg, k, v)
        if got != v:
            raise SystemExit(f"{spec['name']}: config.{k} is {got!r}, wanted {v!r}")
    return cfg


@torch.no_grad()
def randomize(model, seed):
    """Every parameter from one CPU generator, in named_parameters order (tied ones once)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    for name, p in model.named_parameters():
        n = torch.randn(p.shape, generator=g, dtype=torch.float32)
        if name.endswith("norm.weight") or "layernorm" in name:
            v = 1.0 + NORM_STD * n
        elif name.endswith(".bias"):
            v = BIAS_STD * n
        elif "embed_tokens" in name or name.startswith("lm_head"):
            v = EMBED_STD * n
        else:
            v = MATRIX_STD * n
        p.copy_(v.to(p.dtype))


def reshard(out):
    """Splits out/model.safetensors into shards of <= SHARD_BYTES plus an index, the way
    save_pretrained(max_shard_size=...) does, for a transformers that did not shard."""
    single = os.path.join(out, "model.safetensors")
    tensors = {}
    with safe_open(single, framework="pt") as f:
        for k in f.keys():
            tensors[k] = f.get_tensor(k)
    groups, cur, cur_bytes = [], {}, 0
    for k in sorted(tensors):
        nb = tensors[k].numel() * tensors[k].element_size()
        if cur and cur_bytes + nb > SHARD_BYTES:
            groups.append(cur)
            cur, cur_bytes = {}, 0
        cur[k] = tensors[k]
        cur_bytes += nb
    if cur:
        groups.append(cur)
    weight_map, total = {}, 0
    for i, grp in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({k: v.contiguous() for k, v in grp.items()}, os.path.join(out, fname), metadata={"format": "pt"})
        for k, v in grp.items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    os.remove(single)


def save_checkpoint(spec, out):
    torch.manual_seed(spec["seed"])
    cfg = make_config(spec)
    model = spec["model_cls"](cfg).to(torch.float32)
    randomize(model, spec["seed"])
    model = model.to(spec["storage"])
    if spec["shard"]:
        model.save_pretrained(out, max_shard_size=f"{SHARD_BYTES // 1024}KB")
        if not os.path.exists(os.path.join(out, "model.safetensors.index.json")):
            log(f"  {spec['name']}: save_pretrained did not shard; resharding by hand")
            reshard(out)
    else:
        model.save_pretrained(out)
    if not any(f.endswith(".safetensors") for f in os.listdir(out)):
        raise SystemExit(f"{spec['name']}: save_pretrained wrote no .safetensors file in {out}")

    # Only config.json, weights and reference.json make up a fixture.
    for extra in ("generation_config.json", "tokenizer_config.json"):
        p = os.path.join(out, extra)
        if os.path.exists(p):
            os.remove(p)

    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cj = json.load(f)
    storage_name = str(spec["storage"]).replace("torch.", "")
    dtype_value = cj.pop("dtype", None) or cj.pop("torch_dtype", None) or storage_name
    cj.pop("torch_dtype", None)
    if dtype_value != storage_name:
        log(f"  {spec['name']}: config.json said dtype {dtype_value!r}; writing {storage_name!r}")
        dtype_value = storage_name
    # llama3_tied uses the pre-4.56 spelling so the C++ reader is tested on both.
    cj["torch_dtype" if spec["old_dtype_key"] else "dtype"] = dtype_value
    with open(cfg_path, "w") as f:
        json.dump(cj, f, indent=2, sort_keys=True)
        f.write("\n")


def f32_list(t):
    return [float(f"{x:.9g}") for x in t.detach().float().cpu().tolist()]


def margin(row):
    top = torch.topk(row.float(), 2).values
    return float(top[0] - top[1])


@torch.no_grad()
def greedy(model, ids, device):
    """24 greedy tokens through model.generate (KV cache), eos disabled by having none."""
    x = torch.tensor([ids], dtype=torch.long, device=device)
    mask = torch.ones_like(x)
    try:
        out = model.generate(
            input_ids=x,
            attention_mask=mask,
            do_sample=False,
            num_beams=1,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            eos_token_id=None,
            pad_token_id=None,
            bos_token_id=None,
        )
        toks = out[0, len(ids):].tolist()
        method = "generate"
    except Exception as e:  # noqa: BLE001 - a fallback that is recorded, not hidden
        log(f"  generate failed ({type(e).__name__}: {e}); using a manual greedy loop")
        toks, cur = [], x
        for _ in range(NEW_TOKENS):
            nxt = int(model(input_ids=cur).logits[0, -1].argmax())
            toks.append(nxt)
            cur = torch.cat([cur, torch.tensor([[nxt]], device=device)], dim=1)
        method = "manual"
    if len(toks) != NEW_TOKENS:
        raise SystemExit(f"greedy produced {len(toks)} tokens, wanted {NEW_TOKENS}")
    # One no-cache forward over prompt + continuation: the logits that chose each token.
    seq = torch.tensor([ids + toks], dtype=torch.long, device=device)
    logits = model(input_ids=seq).logits[0].float()  # [P + 24, V]
    chooser = logits[len(ids) - 1 : len(ids) - 1 + NEW_TOKENS]
    margins = [margin(chooser[i]) for i in range(NEW_TOKENS)]
    recheck = [int(chooser[i].argmax()) for i in range(NEW_TOKENS)] == toks
    return toks, margins, recheck, method


def verify_loaded(spec, model, out):
    """The reloaded model must hold exactly the saved weights: a renamed or skipped tensor
    would otherwise be silently random-initialised and the references would be worthless."""
    saved = {}
    for fname in sorted(os.listdir(out)):
        if fname.endswith(".safetensors"):
            with safe_open(os.path.join(out, fname), framework="pt") as f:
                for k in f.keys():
                    saved[k] = f.get_tensor(k)
    state = model.state_dict()
    for name, t in saved.items():
        if name not in state:
            raise SystemExit(f"{spec['name']}: saved tensor {name} is not a parameter of the reloaded model")
        if not torch.equal(state[name].detach().cpu().float(), t.float()):
            raise SystemExit(f"{spec['name']}: reloaded {name} differs from the saved tensor")
    for name, p in model.named_parameters():
        if name not in saved and not (name == "lm_head.weight" and spec["config"]["tie_word_embeddings"]):
            raise SystemExit(f"{spec['name']}: parameter {name} was not in the checkpoint (random init)")
    if spec["config"]["tie_word_embeddings"]:
        if not torch.equal(model.lm_head.weight.detach().cpu(), model.model.embed_tokens.weight.detach().cpu()):
            raise SystemExit(f"{spec['name']}: lm_head is not tied to embed_tokens after reload")


def reference(spec, out, device):
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    if type(model).__name__ != spec["model_cls"].__name__:
        raise SystemExit(f"{spec['name']}: reloaded as {type(model).__name__}")
    verify_loaded(spec, model, out)
    model = model.to(device).eval()
    vocab = spec["config"]["vocab_size"]
    g = torch.Generator(device="cpu").manual_seed(spec["seed"] + 7)
    prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
    ref = dict(
        name=spec["name"],
        architecture=spec["model_cls"].__name__,
        storage_dtype=str(spec["storage"]).replace("torch.", ""),
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
        device=str(device),
        seed=spec["seed"],
        vocab_size=vocab,
        greedy_new_tokens=NEW_TOKENS,
        prompts=[],
        full_logits_prompt_index=FULL_LOGITS_PROMPT_INDEX,
        full_logits=None,
    )
    methods = set()
    with torch.no_grad():
        for i, ids in enumerate(prompts):
            x = torch.tensor([ids], dtype=torch.long, device=device)
            logits = model(input_ids=x).logits[0].float()  # [P, V]
            if logits.shape != (len(ids), vocab):
                raise SystemExit(f"{spec['name']}: logits shape {tuple(logits.shape)}")
            if not torch.isfinite(logits).all():
                raise SystemExit(f"{spec['name']}: non-finite logits")
            if i == FULL_LOGITS_PROMPT_INDEX:
                ref["full_logits"] = [f32_list(row) for row in logits]
            toks, margins, recheck, method = greedy(model, ids, device)
            methods.add(method)
            ref["prompts"].append(
                dict(
                    token_ids=ids,
                    last_logits=f32_list(logits[-1]),
                    last_margin=float(f"{margin(logits[-1]):.9g}"),
                    greedy_tokens=toks,
                    greedy_margins=[float(f"{m:.9g}") for m in margins],
                    greedy_min_margin=float(f"{min(margins):.9g}"),
                    greedy_recheck_ok=recheck,
                )
            )
    ref["greedy_method"] = "+".join(sorted(methods))
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    return ref


BEAM_NEW_TOKENS = 12
BEAM_PROMPT_INDICES = [1, 2]  # the 2- and 7-token prompts
# (num_beams, num_return_sequences, length_penalty, early_stopping, with an eos)
BEAM_CASES = [
    (2, 1, 1.0, False, False),
    (2, 2, 1.0, True, False),
    (4, 4, 1.0, False, False),
    (4, 2, 0.5, "never", False),
    (4, 3, 2.0, False, False),
    (3, 3, 1.0, "never", False),
    (4, 4, 1.0, False, True),
    (4, 2, 2.0, True, True),
    (3, 3, 0.5, "never", True),
    (2, 2, 1.0, False, True),
]


@torch.no_grad()
def beam_section(model, ref, device):
    """transformers' beam search outputs (sequences and sequence_scores) for BEAM_CASES."""
    cases = []
    for pi in BEAM_PROMPT_INDICES:
        prompt = ref["prompts"][pi]["token_ids"]
        eos_choice = ref["prompts"][pi]["greedy_tokens"][1]
        x = torch.tensor([prompt], dtype=torch.long, device=device)
        for beams, ret, lp, es, with_eos in BEAM_CASES:
            eos = eos_choice if with_eos else None
            out = model.generate(
                input_ids=x,
                attention_mask=torch.ones_like(x),
                do_sample=False,
                num_beams=beams,
                num_return_sequences=ret,
                length_penalty=lp,
                early_stopping=es,
                max_new_tokens=BEAM_NEW_TOKENS,
                eos_token_id=eos,
                pad_token_id=eos if eos is not None else 0,
                bos_token_id=None,
                output_scores=True,
                return_dict_in_generate=True,
            )
            seqs = []
            for row in out.sequences[:, len(prompt) :].tolist():
                if eos is not None and eos in row:
                    row = row[: row.index(eos) + 1]  # the rest is padding
                seqs.append(row)
            cases.append(
                dict(
                    prompt=prompt,
                    num_beams=beams,
                    num_return_sequences=ret,
                    length_penalty=lp,
                    early_stopping=es,
                    eos_token_id=eos,
                    max_new_tokens=BEAM_NEW_TOKENS,
                    sequences=seqs,
                    sequence_scores=[float(f"{v:.9g}") for v in out.sequences_scores.float().tolist()],
                )
            )
    return dict(transformers_version=transformers.__version__, device=str(device), cases=cases)


def add_beam_sections(out_dir, only, device):
    """--beam-only: adds the beam section to each existing reference.json, weights untouched."""
    for spec in MODELS:
        if only and spec["name"] not in only:
            continue
        out = os.path.join(out_dir, spec["name"])
        path = os.path.join(out, "reference.json")
        if not os.path.exists(path):
            log(f"{spec['name']}: no {path}; skipped")
            continue
        with open(path) as f:
            ref = json.load(f)
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
        verify_loaded(spec, model, out)
        model = model.to(device).eval()
        ref["beam"] = beam_section(model, ref, device)
        with open(path, "w") as f:
            json.dump(ref, f, separators=(",", ":"))
            f.write("\n")
        ended = sum(1 for c in ref["beam"]["cases"] for s in c["sequences"] if len(s) < BEAM_NEW_TOKENS)
        log(f"{spec['name']}: {len(ref['beam']['cases'])} beam cases, {ended} hypotheses ended by eos")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--only", nargs="*", help="write only these fixtures (names)")
    ap.add_argument(
        "--beam-only",
        action="store_true",
        help="only add the beam search section to the reference.json files already in OUT_DIR",
    )
    args = ap.parse_args()

    torch.set_float32_matmul_precision("highest")  # references in true float32 (no TF32)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}")
    if args.beam_only:
        add_beam_sections(args.out_dir, args.only, device)
        return 0

    os.makedirs(args.out_dir, exist_ok=True)
    total = 0
    ok = True
    for spec in MODELS:
        if args.only and spec["name"] not in args.only:
            continue
        out = os.path.join(args.out_dir, spec["name"])
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.makedirs(out)
        save_checkpoint(spec, out)
        ref = reference(spec, out, device)
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
        ref["beam"] = beam_section(model.to(device).eval(), ref, device)
        with open(os.path.join(out, "reference.json"), "w") as f:
            json.dump(ref, f, separators=(",", ":"))
            f.write("\n")
        files = sorted(os.listdir(out))
        size = sum(os.path.getsize(os.path.join(out, f)) for f in files)
        total += size
        log(f"{spec['name']}: {ref['architecture']} stored {ref['storage_dtype']}, {size / 1024:.0f} KiB")
        for f in files:
            log(f"    {f:40s} {os.path.getsize(os.path.join(out, f)):8d} B")
        for p in ref["prompts"]:
            flag = "" if p["greedy_recheck_ok"] else "   <-- no-cache recheck disagrees (near tie)"
            log(
                f"    prompt len {len(p['token_ids']):3d}: last margin {p['last_margin']:.4f}, "
                f"greedy min margin {p['greedy_min_margin']:.4f}, tokens {p['greedy_tokens'][:8]}...{flag}"
            )
            ok = ok and p["greedy_recheck_ok"]
        log(f"    greedy via {ref['greedy_method']}")
    log(f"total {total / 1024:.0f} KiB in {args.out_dir}")
    if total > 2 * 1024 * 1024:
        log("ERROR: fixtures exceed 2 MiB")
        return 1
    if not ok:
        log("WARNING: a greedy path has a near tie (see above); the tests report the margin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
