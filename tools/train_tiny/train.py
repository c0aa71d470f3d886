#!/usr/bin/env python3
"""Trains troupe's embedded default model, troupe-fortunes, on Debian's fortune files.

    python3 tools/train_tiny/train.py DATA_DIR OUT_DIR [--seconds 240]

DATA_DIR: a copy of /usr/share/games/fortunes (tools/train_tiny/prepare_data.sh makes one).
OUT_DIR/troupe-fortunes/ receives a Hugging Face checkpoint (config.json, model.safetensors in
bf16, tokenizer.json, tokenizer_config.json, generation_config.json) and eval.json (the
evaluation, samples and the search log); OUT_DIR/heldout.txt the held-out fortunes. Seven
files in all, so a log tee'd into the same folder still fits the device tool's 8 files.

Written for one GPU, python 3.12, torch 2.11, transformers 5.x, tokenizers 0.23. The whole
run (tokenizer, search, evaluation, saving) stays under 6 minutes. It is meant to run once,
so everything that runs at the end (saving, reloading with transformers, evaluation,
sampling) is first rehearsed on a 5-step model before the real training starts, and the
results are saved before the evaluation (eval.json first holds only the training summary)
so a failing evaluation can be redone with --eval-only without training again.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import shutil
import sys
import time
import traceback

# Everything is local: never let transformers or huggingface_hub try the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fortune_data  # noqa: E402
import schedule  # noqa: E402

MODEL_NAME = "troupe-fortunes"
SPECIAL_TOKENS = fortune_data.SPECIAL_TOKENS  # ids 0..5 in this order
BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
VOCAB_SIZE = 4096
SEQ_LEN = 256          # packed training rows and the evaluation truncation
MAX_POSITIONS = 512
ROPE_THETA = 10000.0
IGNORE = -100          # cross_entropy's ignore_index: padding targets

# Llama shape: 5 layers of hidden 256 (8 query heads, 4 KV heads of 32), SwiGLU 688,
# tied 4096-token embedding: 4.68 M parameters, 9.4 MB in bf16.
ARCH = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 5,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "max_position_embeddings": MAX_POSITIONS,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "pad_token_id": PAD_ID,
}
PARAM_RANGE = (3_000_000, 5_500_000)

BATCH_ROWS = 32        # 32 x 256 = 8192 tokens per step: many updates per epoch
# No torch.compile: an epoch takes about a second in eager mode, the search builds a fresh
# model for every run, and a compile (tens of seconds, a possible graph break in the HF
# modules) would cost more of the budget than it saves.
BASE_TRIAL = schedule.Trial("base", epochs=6, lr=2e-3, weight_decay=0.1)
ADAM_BETAS = (0.9, 0.95)
GRAD_CLIP = 1.0
INIT_STD = 0.02

EVAL_DOCS = 64         # the first 64 held-out fortunes are the reported evaluation
MIN_VALIDATION_DOCS = 50  # the held-out fortunes after those choose the best model
PROMPTS = ["The future of AI is", "Once upon a time", "A wise man"]
SAMPLING = {"temperature": 0.8, "top_p": 0.95, "max_new_tokens": 64}
SAMPLES_PER_PROMPT = 8
SAMPLE_SEED = 0
GREEDY_NEW_TOKENS = 32

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|eos|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


class Fatal(Exception):
    """A check failed: the message says which and why."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise Fatal(msg)


# ----------------------------------------------------------------------------- tokenizer


def train_tokenizer(train_docs: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    # No unk token: the byte-level alphabet covers every input.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(train_docs, trainer=trainer, length=len(train_docs))
    # Like Llama 3: the BOS comes from a template, the EOS is appended by whoever builds
    # documents (training here, the chat template for chats).
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS}:1 $B:1",
        special_tokens=[(BOS, BOS_ID)],
    )
    return tok


def check_tokenizer(tok, docs: list[str]) -> list[list[int]]:
    """Special ids, vocabulary size, BOS handling and an exact round trip on every
    document. Returns each document's ids (BOS first, no EOS)."""
    for want_id, text in enumerate(SPECIAL_TOKENS):
        got = tok.token_to_id(text)
        check(got == want_id, f"tokenizer: {text} has id {got}, expected {want_id}")
    size = tok.get_vocab_size()
    check(VOCAB_SIZE * 0.9 <= size <= VOCAB_SIZE,
          f"tokenizer: vocabulary size {size}, expected {VOCAB_SIZE}")
    if size != VOCAB_SIZE:
        log(f"warning: tokenizer vocabulary is {size} < {VOCAB_SIZE}; the model keeps {VOCAB_SIZE} rows")
    encodings = tok.encode_batch(docs)
    ids = [e.ids for e in encodings]
    for text, row in zip(docs, ids):
        check(len(row) >= 2 and row[0] == BOS_ID and BOS_ID not in row[1:],
              f"tokenizer: expected exactly one leading BOS for {text[:40]!r}, got {row[:8]}")
        check(max(row) < VOCAB_SIZE, f"tokenizer: id {max(row)} >= {VOCAB_SIZE}")
    decoded = tok.decode_batch(ids, skip_special_tokens=True)
    bad = [i for i, (a, b) in enumerate(zip(docs, decoded)) if a != b]
    check(not bad, f"tokenizer: {len(bad)} documents do not round-trip, first: "
                   f"{docs[bad[0]][:60]!r} -> {decoded[bad[0]][:60]!r}" if bad else "")
    one = tok.encode("Hello world").ids
    check(one[0] == BOS_ID and tok.decode(one, skip_special_tokens=True) == "Hello world",
          f"tokenizer: 'Hello world' -> {one}")
    return ids


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def save_tokenizer(tok, model_dir: str) -> None:
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    write_json(os.path.join(model_dir, "tokenizer_config.json"), tokenizer_config())


# ----------------------------------------------------------------------------- data


def documents_tensors(doc_ids: list[list[int]]) -> list[torch.Tensor]:
    """Each training document: BOS + text + EOS, int64 on the CPU."""
    return [torch.tensor(ids + [EOS_ID], dtype=torch.long) for ids in doc_ids]


def make_rows(flat: torch.Tensor, seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Cuts a token stream into rows so that every token but the first is predicted once.

    flat: [L] int64. Returns inputs [N, seq_len] and targets [N, seq_len] (int64), where
    targets are the inputs shifted by one and the padding of the last row is IGNORE."""
    seq_len = seq_len or SEQ_LEN
    check(flat.dim() == 1 and flat.numel() >= 2, f"make_rows: need a 1-D stream, got {tuple(flat.shape)}")
    n_pred = flat.numel() - 1
    n_rows = (n_pred + seq_len - 1) // seq_len
    pad = n_rows * seq_len + 1 - flat.numel()
    padded = torch.cat([flat, torch.full((pad,), PAD_ID, dtype=flat.dtype)])
    inputs = padded[:-1].reshape(n_rows, seq_len).clone()
    targets = padded[1:].clone()
    targets[n_pred:] = IGNORE
    return inputs, targets.reshape(n_rows, seq_len)


def epoch_rows(docs: list[torch.Tensor], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The documents in a seeded random order, packed into rows."""
    order = torch.randperm(len(docs), generator=torch.Generator().manual_seed(seed)).tolist()
    return make_rows(torch.cat([docs[i] for i in order]))


# ----------------------------------------------------------------------------- model


def build_config():
    from transformers import LlamaConfig

    kwargs = dict(ARCH)
    kwargs["attention_dropout"] = 0.0
    kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": ROPE_THETA}
    return LlamaConfig(**kwargs)


def init_weights(model: torch.nn.Module, n_layers: int) -> None:
    """Our own deterministic init instead of the library's: N(0, 0.02) for matrices (the
    tied embedding included), N(0, 0.02 / sqrt(2 * layers)) for the two projections that
    write into the residual stream (GPT-2), ones for the RMSNorm weights."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                check(name.endswith("norm.weight"), f"init: unexpected 1-D parameter {name}")
                p.fill_(1.0)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                p.normal_(0.0, INIT_STD / math.sqrt(2 * n_layers))
            else:
                p.normal_(0.0, INIT_STD)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied tensor counts once


def is_tied(model) -> bool:
    return model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def new_model(device: torch.device, seed: int):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(build_config())
    if not is_tied(model):
        model.tie_weights()
    check(is_tied(model), "model: lm_head is not tied to embed_tokens")
    init_weights(model, ARCH["num_hidden_layers"])
    model.to(device)
    check(is_tied(model), "model: lm_head lost its tie to embed_tokens after .to()")
    n = count_parameters(model)
    check(PARAM_RANGE[0] <= n <= PARAM_RANGE[1], f"model: {n} parameters, expected {PARAM_RANGE}")
    return model


def forward_logits(model, inputs: torch.Tensor) -> torch.Tensor:
    """inputs [B, T] int64 -> logits [B, T, V] (model dtype or autocast dtype)."""
    return model(input_ids=inputs, use_cache=False).logits


def loss_sum(model, inputs: torch.Tensor, targets: torch.Tensor, autocast: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token NLL over the non-IGNORE targets, and their count (both 0-d)."""
    with torch.autocast(device_type=inputs.device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = forward_logits(model, inputs)
    check(logits.shape == (*inputs.shape, VOCAB_SIZE),
          f"model: logits {tuple(logits.shape)} for inputs {tuple(inputs.shape)}")
    nll = F.cross_entropy(logits.float().reshape(-1, VOCAB_SIZE), targets.reshape(-1),
                          ignore_index=IGNORE, reduction="sum")
    return nll, (targets != IGNORE).sum()


@torch.no_grad()
def validation_loss(model, rows: tuple[torch.Tensor, torch.Tensor], autocast: bool, batch: int = 64) -> float:
    """Mean NLL per token over packed validation rows (already on the device)."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=rows[0].device)
    count = torch.zeros((), dtype=torch.int64, device=rows[0].device)
    for i in range(0, rows[0].shape[0], batch):
        s, c = loss_sum(model, rows[0][i:i + batch], rows[1][i:i + batch], autocast)
        total += s.double()
        count += c
    model.train(was_training)
    return float(total / count.clamp(min=1))


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 50.0))  # a log line must not overflow on a diverged loss


def make_optimizer(model, lr: float, weight_decay: float):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    fused = next(model.parameters()).is_cuda
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=ADAM_BETAS, eps=1e-8, fused=fused)
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(groups, lr=lr, betas=ADAM_BETAS, eps=1e-8)


class Best:
    """The best model seen over all runs (by validation loss)."""

    def __init__(self) -> None:
        self.val = math.inf
        self.state: dict | None = None
        self.trial = ""
        self.epoch = 0.0
        self.tokens = 0

    def offer(self, model, val: float, trial: str, epoch: float, tokens: int) -> bool:
        if not val < self.val:
            return False
        self.val, self.trial, self.epoch, self.tokens = val, trial, epoch, tokens
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return True


def run_trial(trial: schedule.Trial, model, train_docs: list[torch.Tensor], val_rows,
              device: torch.device, deadline: float, best: Best, seed: int,
              autocast: bool = True, max_steps: int | None = None,
              dry_run: bool = False) -> schedule.TrialResult:
    """One cosine run. Evaluates on the validation rows twice per epoch and at the end,
    offers every evaluation to `best`, stops at `deadline` (time.monotonic()) or after
    max_steps. dry_run: logs and checks the loss of every step (a sync per step)."""
    t_start = time.monotonic()
    n_rows = make_rows(torch.cat(train_docs))[0].shape[0]  # the same every epoch
    steps_per_epoch = n_rows // BATCH_ROWS
    check(steps_per_epoch >= 1, f"train: {n_rows} rows is less than one batch of {BATCH_ROWS}")
    total_steps = trial.epochs * steps_per_epoch
    warmup = schedule.warmup_steps(total_steps)
    eval_every = max(10, steps_per_epoch // 2)
    opt = make_optimizer(model, trial.lr, trial.weight_decay)
    model.train()
    log(f"run {trial.name}: {trial.epochs} epochs x {steps_per_epoch} steps of {BATCH_ROWS}x{SEQ_LEN}, "
        f"lr {trial.lr:g}, weight decay {trial.weight_decay:g}, warmup {warmup}")
    step = 0
    last_eval = 0
    trial_best = math.inf
    trial_best_epoch = 0.0
    failed = False
    stopped = False
    window_loss = torch.zeros((), dtype=torch.float64, device=device)
    window_count = torch.zeros((), dtype=torch.int64, device=device)

    def evaluate(lr: float) -> bool:
        """Validation at the current step; False when training diverged."""
        nonlocal last_eval, trial_best, trial_best_epoch
        last_eval = step
        train_loss = float(window_loss / window_count.clamp(min=1))
        window_loss.zero_()
        window_count.zero_()
        val = validation_loss(model, val_rows, autocast)
        epochs_done = step / steps_per_epoch
        if not (math.isfinite(train_loss) and math.isfinite(val)):
            log(f"  {trial.name}: diverged at step {step} (train {train_loss}, val {val})")
            return False
        if val < trial_best:
            trial_best, trial_best_epoch = val, epochs_done
        mark = ""
        if best.offer(model, val, trial.name, epochs_done, step * BATCH_ROWS * SEQ_LEN):
            mark = "  * best so far"
        elapsed = time.monotonic() - t_start
        log(f"  {trial.name} ep {epochs_done:5.2f} step {step:5d}/{total_steps} lr {lr:.2e} "
            f"train {train_loss:.4f} val {val:.4f} (ppl {perplexity(val):7.2f}) "
            f"{step * BATCH_ROWS * SEQ_LEN / max(elapsed, 1e-9) / 1e6:.2f} Mtok/s{mark}")
        return True

    lr = trial.lr
    for epoch in range(trial.epochs):
        inputs, targets = epoch_rows(train_docs, seed * 1000 + epoch)
        inputs = inputs[: steps_per_epoch * BATCH_ROWS].to(device, non_blocking=True)
        targets = targets[: steps_per_epoch * BATCH_ROWS].to(device, non_blocking=True)
        for b in range(steps_per_epoch):
            if time.monotonic() >= deadline or (max_steps is not None and step >= max_steps):
                stopped = True
                break
            lr = schedule.lr_at(step, total_steps, trial.lr, warmup)
            for group in opt.param_groups:
                group["lr"] = lr
            x = inputs[b * BATCH_ROWS:(b + 1) * BATCH_ROWS]          # [B, T] int64
            y = targets[b * BATCH_ROWS:(b + 1) * BATCH_ROWS]         # [B, T] int64
            nll, count = loss_sum(model, x, y, autocast)
            loss = nll / count.clamp(min=1)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
            opt.step()
            opt.zero_grad(set_to_none=True)
            window_loss += nll.detach().double()
            window_count += count
            step += 1
            if dry_run:
                value = float(loss)
                log(f"  dry step {step}: loss {value:.4f} (ln V = {math.log(VOCAB_SIZE):.4f})")
                check(math.isfinite(value), f"dry run: loss {value} at step {step}")
                if step == 1:
                    check(abs(value - math.log(VOCAB_SIZE)) < 1.5,
                          f"dry run: first loss {value:.3f} is far from ln(V) = {math.log(VOCAB_SIZE):.3f}: bad init")
            if step % eval_every == 0 or step == total_steps:
                if not evaluate(lr):
                    failed = stopped = True
                    break
        if stopped:
            break
    # A run cut by the deadline still offers its last state (it may be the only run).
    if not failed and max_steps is None and step > last_eval:
        failed = not evaluate(lr)
    seconds = time.monotonic() - t_start
    epochs_done = max(step / steps_per_epoch, 1e-9)
    return schedule.TrialResult(
        trial=trial, best_val=trial_best, best_epoch=trial_best_epoch,
        completed=(step == total_steps), seconds=seconds,
        seconds_per_epoch=seconds / epochs_done, failed=failed,
        extra={"steps": step, "steps_per_epoch": steps_per_epoch,
               "tokens_seen": step * BATCH_ROWS * SEQ_LEN})


# ----------------------------------------------------------------------------- saving


def write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def generation_config():
    from transformers import GenerationConfig

    return GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                            do_sample=True, **SAMPLING)


def save_checkpoint(model, tok, model_dir: str) -> None:
    """HF layout, weights in bf16. The training model is left untouched (a copy is cast)."""
    os.makedirs(model_dir, exist_ok=True)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    bf16.generation_config = generation_config()
    bf16.save_pretrained(model_dir)
    del bf16
    generation_config().save_pretrained(model_dir)
    save_tokenizer(tok, model_dir)
    # config.json: every field troupe's loader reads spelled out, and the legacy top-level
    # rope_theta next to transformers 5's rope_parameters so older readers find it too.
    path = os.path.join(model_dir, "config.json")
    with open(path, encoding="utf-8") as f:
        original = f.read()
    cfg = json.loads(original)
    for key, want in ARCH.items():
        if key in cfg:
            check(cfg[key] == want, f"config.json: {key} = {cfg[key]!r}, expected {want!r}")
        else:
            cfg[key] = want
    rope = cfg.get("rope_parameters") or {}
    check(float(rope.get("rope_theta", ROPE_THETA)) == ROPE_THETA,
          f"config.json: rope_parameters = {rope!r}, expected rope_theta {ROPE_THETA}")
    cfg.setdefault("rope_theta", ROPE_THETA)
    cfg.setdefault("dtype", "bfloat16")
    check(cfg.get("architectures") == ["LlamaForCausalLM"], f"config.json: architectures = {cfg.get('architectures')}")
    check(cfg.get("model_type") == "llama", f"config.json: model_type = {cfg.get('model_type')}")
    write_json(path, cfg)
    try:
        from transformers import AutoConfig

        back = AutoConfig.from_pretrained(model_dir)
        theta = (getattr(back, "rope_parameters", None) or {}).get("rope_theta", getattr(back, "rope_theta", None))
        check(float(theta) == ROPE_THETA and back.tie_word_embeddings, f"reloaded config: rope_theta {theta}, "
              f"tie_word_embeddings {back.tie_word_embeddings}")
    except Exception as e:  # noqa: BLE001 - keep what transformers wrote rather than fail
        log(f"warning: the completed config.json does not load back ({type(e).__name__}: {e}); "
            "keeping the one transformers wrote")
        with open(path, "w", encoding="utf-8") as f:
            f.write(original)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json"):
        check(os.path.isfile(os.path.join(model_dir, name)), f"save: {model_dir}/{name} is missing")
    size = os.path.getsize(os.path.join(model_dir, "model.safetensors"))
    check(size < 12 * 1024 * 1024, f"save: model.safetensors is {size} bytes (limit 12 MiB)")
    log(f"saved {model_dir} (model.safetensors {size / 1e6:.2f} MB)")


def load_for_eval(model_dir: str, device: torch.device):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.to(device)
    model.eval()
    check(next(model.parameters()).dtype == torch.float32, "eval: model did not load as float32")
    check(is_tied(model), "eval: reloaded model has an untied lm_head")
    check(model.config.vocab_size == VOCAB_SIZE, f"eval: vocab_size {model.config.vocab_size}")
    return model


def check_reload_matches(trained, reloaded, device: torch.device) -> float:
    """The reloaded bf16 checkpoint must give the logits of the in-memory model rounded to
    bf16 (both computed in float32 without autocast). Returns the max abs difference.
    Only the parameters are rounded: module.to(bf16) would also round the rotary inv_freq
    buffer, which the checkpoint does not hold (it is recomputed in float32 on load)."""
    ref = copy.deepcopy(trained).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))
    ids = torch.tensor([[BOS_ID] + list(range(10, 60))], dtype=torch.long, device=device)
    with torch.no_grad():
        a = forward_logits(ref, ids).float()
        b = forward_logits(reloaded, ids).float()
    diff = float((a - b).abs().max())
    check(diff < 2e-2, f"reload: saved model's logits differ from the trained model's by {diff}")
    return diff


# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate_documents(model, tok, texts: list[str], device: torch.device) -> dict:
    """Per-document NLL in float64 of log_softmax over float32 logits (no autocast)."""
    documents = []
    total_nll = 0.0
    total_pred = 0
    for text in texts:
        full = tok.encode(text).ids
        ids = full[:SEQ_LEN]
        check(ids[0] == BOS_ID and len(ids) >= 2, f"eval: bad ids for {text[:40]!r}: {ids[:4]}")
        x = torch.tensor([ids], dtype=torch.long, device=device)
        logits = forward_logits(model, x)[0].double()           # [T, V]
        logp = torch.log_softmax(logits[:-1], dim=-1)           # [T-1, V]
        target = x[0, 1:]                                       # [T-1]
        nll = float(-logp.gather(1, target[:, None]).sum())
        documents.append({
            "text": text,
            "token_ids": ids,
            "truncated": len(full) > len(ids),
            "nll_sum": nll,
            "num_predicted": len(ids) - 1,
            "argmax_ids": logits.argmax(dim=-1).tolist(),
        })
        total_nll += nll
        total_pred += len(ids) - 1
    ppl = math.exp(total_nll / total_pred)
    check(math.isfinite(ppl), f"eval: perplexity {ppl}")
    return {"documents": documents, "total_nll": total_nll, "total_predicted": total_pred,
            "perplexity": ppl}


@torch.no_grad()
def manual_generate(model, x: torch.Tensor, do_sample: bool, max_new_tokens: int, n: int,
                    temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """Fallback for model.generate: recomputes the whole prefix each step (no KV cache),
    temperature then nucleus (top-p) sampling, stops rows at EOS and pads them after.
    x [1, P] -> [n, P + new]."""
    seqs = x.repeat(n, 1)
    done = torch.zeros(n, dtype=torch.bool, device=x.device)
    for _ in range(max_new_tokens):
        logits = forward_logits(model, seqs)[:, -1].float()                # [n, V]
        if do_sample:
            probs = torch.softmax(logits / temperature, dim=-1)
            p_sorted, idx = probs.sort(dim=-1, descending=True)
            keep = (p_sorted.cumsum(dim=-1) - p_sorted) < top_p                # always keeps the top token
            p_sorted = p_sorted * keep
            pick = torch.multinomial(p_sorted / p_sorted.sum(dim=-1, keepdim=True), 1)
            nxt = idx.gather(1, pick)[:, 0]
        else:
            nxt = logits.argmax(dim=-1)
        nxt = torch.where(done, torch.full_like(nxt, PAD_ID), nxt)
        seqs = torch.cat([seqs, nxt[:, None]], dim=1)
        done |= nxt == EOS_ID
        if bool(done.all()):
            break
    return seqs


def generate(model, x: torch.Tensor, do_sample: bool, max_new_tokens: int, n: int) -> tuple[torch.Tensor, str]:
    """model.generate with our settings; on any error the manual fallback. Returns the
    sequences [n, P + new] and which sampler made them."""
    settings = dict(temperature=SAMPLING["temperature"], top_p=SAMPLING["top_p"]) if do_sample \
        else dict(temperature=1.0, top_p=1.0)
    try:
        out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=do_sample,
                             max_new_tokens=max_new_tokens, num_return_sequences=n,
                             bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, **settings)
        check(out.dim() == 2 and out.shape[0] == n and out.shape[1] > x.shape[1]
              and torch.equal(out[:, :x.shape[1]], x.repeat(n, 1)), f"generate: output {tuple(out.shape)}")
        return out, "transformers generate"
    except Exception as e:  # noqa: BLE001 - samples must not be lost to an API detail
        log(f"warning: model.generate failed ({type(e).__name__}: {e}); using the manual sampler")
        return manual_generate(model, x, do_sample, max_new_tokens, n, **settings), "manual (fallback)"


def sample_prompts(model, tok, device: torch.device, samples: int = SAMPLES_PER_PROMPT,
                   max_new_tokens: int = SAMPLING["max_new_tokens"]) -> tuple[list, str]:
    """`samples` sampled continuations of each prompt, torch seed SAMPLE_SEED before each."""
    out_list, sampler = [], ""
    for prompt in PROMPTS:
        ids = tok.encode(prompt).ids
        x = torch.tensor([ids], dtype=torch.long, device=device)
        torch.manual_seed(SAMPLE_SEED)
        out, sampler = generate(model, x, True, max_new_tokens, samples)
        conts = [tok.decode(row[len(ids):].tolist(), skip_special_tokens=True) for row in out]
        out_list.append({"prompt": prompt, "prompt_ids": ids, "continuations": conts})
    return out_list, sampler


def greedy_prompts(model, tok, device: torch.device, new_tokens: int = GREEDY_NEW_TOKENS) -> list:
    """Greedy continuations of each prompt (a fixture for greedy parity tests)."""
    out_list = []
    for prompt in PROMPTS:
        ids = tok.encode(prompt).ids
        x = torch.tensor([ids], dtype=torch.long, device=device)
        out, sampler = generate(model, x, False, new_tokens, 1)
        new_ids = out[0, len(ids):].tolist()
        out_list.append({"prompt": prompt, "prompt_ids": ids, "new_token_ids": new_ids,
                         "text": tok.decode(new_ids, skip_special_tokens=True), "sampler": sampler})
    return out_list


def check_hf_tokenizer(model_dir: str, tok) -> str:
    """Loads the saved tokenizer through AutoTokenizer and compares ids and the chat
    template. Not fatal: troupe reads tokenizer.json itself; the answer goes in eval.json."""
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(model_dir)
        for text in ["Hello world", " leading space", "tabs\tand\nnewlines", "Ünïcödé ✓"]:
            got = hf(text)["input_ids"]
            want = tok.encode(text).ids
            if list(got) != list(want):
                return f"mismatch on {text!r}: AutoTokenizer {list(got)} vs tokenizers {want}"
        chat = hf.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                      add_generation_prompt=True)
        if chat != "<|bos|><|user|>Hi<|eos|><|assistant|>":
            return f"chat template rendered {chat!r}"
        return "ok"
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"error: {type(e).__name__}: {e}"


def versions() -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda}
    for name in ("transformers", "tokenizers", "safetensors"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            out[name] = None
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


SUMMARY_KEYS = ("train_seconds", "train_tokens_seen", "num_parameters", "best_run", "search",
                "data", "batch", "optimizer", "seed")


def run_evaluation(model_dir: str, tok, heldout: list[str], device: torch.device, summary: dict,
                   trained=None) -> dict:
    """eval.json from the saved checkpoint. Sampling failures are recorded, not raised."""
    torch.set_float32_matmul_precision("highest")  # an fp32 reference, no TF32
    model = load_for_eval(model_dir, device)
    result: dict = {}
    if trained is not None:
        result["reload_max_abs_logit_diff"] = check_reload_matches(trained, model, device)
    ev = evaluate_documents(model, tok, heldout[:EVAL_DOCS], device)
    result.update(ev)
    result["evaluation"] = (f"first {EVAL_DOCS} held-out fortunes, each encoded alone (BOS + text, "
                            f"no EOS), truncated to {SEQ_LEN} tokens; saved bf16 checkpoint loaded "
                            "with dtype=float32, eager attention; nll_sum = sum over predicted "
                            "tokens of -log softmax (float64); perplexity = exp(total_nll / total_predicted)")
    try:
        sampled, sampler = sample_prompts(model, tok, device)
        result["samples"] = {"temperature": SAMPLING["temperature"], "top_p": SAMPLING["top_p"],
                             "max_new_tokens": SAMPLING["max_new_tokens"], "seed": SAMPLE_SEED,
                             "sampler": sampler, "prompts": sampled}
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        result["samples_error"] = f"{type(e).__name__}: {e}"
    try:
        result["greedy"] = greedy_prompts(model, tok, device)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        result["greedy_error"] = f"{type(e).__name__}: {e}"
    result["hf_tokenizer_check"] = check_hf_tokenizer(model_dir, tok)
    for key in SUMMARY_KEYS:
        result[key] = summary.get(key)
    result["versions"] = versions()
    write_json(os.path.join(model_dir, "eval.json"), result)
    return result


# ----------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir", help="copy of /usr/share/games/fortunes (prepare_data.sh)")
    p.add_argument("out_dir", help="receives troupe-fortunes/ and heldout.txt")
    p.add_argument("--seconds", type=float, default=240.0, help="training time budget (all runs)")
    p.add_argument("--total-seconds", type=float, default=330.0,
                   help="hard wall-clock budget of the whole script; training stops early "
                        "enough to leave time for saving and evaluation")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--eval-only", action="store_true",
                   help="skip training: re-evaluate OUT_DIR/troupe-fortunes (after a failed evaluation)")
    args = p.parse_args(argv)
    if args.seconds <= 0:
        p.error(f"--seconds must be > 0, got {args.seconds}")
    return args


def prepare(args):
    docs = fortune_data.load_fortunes(args.data_dir)
    train_texts, heldout = fortune_data.split_train_heldout(docs)
    log(f"{len(docs)} fortunes: {len(train_texts)} train, {len(heldout)} held out "
        f"({sum(map(len, train_texts)) / 1e6:.2f} M characters of training text)")
    check(len(heldout) >= EVAL_DOCS + MIN_VALIDATION_DOCS, f"data: only {len(heldout)} held-out fortunes, "
          f"need {EVAL_DOCS} for evaluation + {MIN_VALIDATION_DOCS} for validation")
    os.makedirs(args.out_dir, exist_ok=True)
    fortune_data.write_fortune_file(os.path.join(args.out_dir, "heldout.txt"), heldout)
    return train_texts, heldout


def pick_device() -> torch.device:
    forced = os.environ.get("TRAIN_TINY_DEVICE")  # the CPU smoke test sets "cpu"
    if forced:
        return torch.device(forced)
    check(torch.cuda.is_available(), "no CUDA device: this script trains on the GPU")
    return torch.device("cuda")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv=None) -> int:
    args = parse_args(argv)
    device = pick_device()
    # Training runs under bf16 autocast; float32 work (evaluation, the reload check) must be
    # a true float32 reference, so no TF32.
    torch.set_float32_matmul_precision("highest")
    log(f"torch {torch.__version__} on {torch.cuda.get_device_name(0) if device.type == 'cuda' else device}")
    log(f"versions: {json.dumps(versions())}")
    model_dir = os.path.join(args.out_dir, MODEL_NAME)
    train_texts, heldout = prepare(args)

    if args.eval_only:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        with open(os.path.join(model_dir, "eval.json"), encoding="utf-8") as f:
            summary = json.load(f)  # the training summary survives in it, evaluated or not
        res = run_evaluation(model_dir, tok, heldout, device, summary)
        log(f"held-out perplexity {res['perplexity']:.3f}")
        return 0

    tok = train_tokenizer(train_texts)
    train_ids = check_tokenizer(tok, train_texts)
    heldout_ids = check_tokenizer(tok, heldout)
    n_train_tokens = sum(len(i) + 1 for i in train_ids)
    log(f"tokenizer: {tok.get_vocab_size()} tokens; training stream {n_train_tokens / 1e6:.3f} M tokens "
        f"({sum(map(len, train_texts)) / n_train_tokens:.2f} characters per token)")
    train_docs = documents_tensors(train_ids)
    # Model selection uses held-out fortunes after the reported 64, so the reported
    # perplexity is measured on text that chose nothing.
    val_flat = torch.cat(documents_tensors(heldout_ids[EVAL_DOCS:]))
    val_rows = tuple(t.to(device) for t in make_rows(val_flat))
    log(f"validation: {len(heldout_ids) - EVAL_DOCS} fortunes, {val_flat.numel()} tokens, {val_rows[0].shape[0]} rows")

    # Dry run and rehearsal: 5 real steps, then everything the end of the script does.
    autocast = device.type == "cuda"  # bf16 autocast is slow on the CPU (the smoke test)
    dry_best = Best()
    model = new_model(device, args.seed)
    n_params = count_parameters(model)
    log(f"model: {n_params} parameters ({n_params / 1e6:.2f} M), tied embeddings")
    run_trial(schedule.Trial("dry-run", 1, BASE_TRIAL.lr, BASE_TRIAL.weight_decay), model, train_docs,
              val_rows, device, math.inf, dry_best, args.seed, autocast=autocast, max_steps=5, dry_run=True)
    val = validation_loss(model, val_rows, autocast)
    check(math.isfinite(val), f"dry run: validation loss {val}")
    log(f"dry run ok: validation loss {val:.4f}")
    sync(device)
    t = time.monotonic()
    timing = run_trial(schedule.Trial("timing", 1, BASE_TRIAL.lr, BASE_TRIAL.weight_decay), model,
                       train_docs, val_rows, device, math.inf, dry_best, args.seed, autocast=autocast,
                       max_steps=20)
    sync(device)
    step_s = (time.monotonic() - t) / 20
    est_epoch_s = step_s * timing.extra["steps_per_epoch"] * 1.15
    log(f"timing: {step_s * 1000:.1f} ms per step, about {est_epoch_s:.2f} s per epoch")
    rehearsal_root = os.path.join(args.out_dir, ".rehearsal")
    shutil.rmtree(rehearsal_root, ignore_errors=True)
    rehearsal_dir = os.path.join(rehearsal_root, MODEL_NAME)
    save_checkpoint(model, tok, rehearsal_dir)
    reloaded = load_for_eval(rehearsal_dir, device)
    diff = check_reload_matches(model, reloaded, device)
    small = evaluate_documents(reloaded, tok, heldout[:4], device)
    try:
        _, sampler = sample_prompts(reloaded, tok, device, samples=2, max_new_tokens=8)
        greedy_prompts(reloaded, tok, device, new_tokens=4)
        log(f"rehearsal sampling ok ({sampler})")
    except Exception:  # noqa: BLE001 - samples are not worth stopping for; the end records the error
        traceback.print_exc()
        log("warning: sampling failed in the rehearsal (see above); training goes on")
    hf_tok = check_hf_tokenizer(rehearsal_dir, tok)
    log(f"rehearsal ok: reload max logit diff {diff:.2e}, 4-document perplexity {small['perplexity']:.1f}, "
        f"AutoTokenizer check: {hf_tok}")
    del reloaded, model
    shutil.rmtree(rehearsal_root, ignore_errors=True)

    # The search.
    train_start = time.monotonic()
    reserve_s = 45.0  # saving + evaluation + sampling after training
    deadline = min(train_start + args.seconds, T0 + args.total_seconds - reserve_s)
    check(deadline - train_start > min(20.0, 0.5 * args.seconds),
          f"budget: only {deadline - train_start:.0f} s left for training of --seconds {args.seconds:g}")
    best = Best()
    results: list[schedule.TrialResult] = []
    sec_per_epoch = est_epoch_s
    while True:
        remaining = deadline - time.monotonic()
        trial = schedule.plan_next(results, BASE_TRIAL, remaining, sec_per_epoch)
        if trial is None:
            break
        model = new_model(device, args.seed)
        res = run_trial(trial, model, train_docs, val_rows, device, deadline, best, args.seed,
                        autocast=autocast)
        results.append(res)
        if res.extra["steps"] > 0 and res.completed:
            sec_per_epoch = res.seconds_per_epoch
        log(f"run {trial.name} done: best val {res.best_val:.4f} at epoch {res.best_epoch:.2f}, "
            f"{res.seconds:.1f} s{' (cut by the deadline)' if not res.completed else ''}"
            f"{' DIVERGED' if res.failed else ''}")
        del model
        if time.monotonic() >= deadline:
            break
    train_seconds = time.monotonic() - train_start
    check(best.state is not None, "search: no run produced a finite validation loss")
    log(f"search done in {train_seconds:.1f} s: best {best.trial} at epoch {best.epoch:.2f}, "
        f"val {best.val:.4f} (ppl {perplexity(best.val):.2f})")

    model = new_model(device, args.seed)
    model.load_state_dict(best.state)
    check(is_tied(model), "final: lm_head untied after load_state_dict")
    summary = {
        "train_seconds": round(train_seconds, 2),
        "train_tokens_seen": best.tokens,
        "num_parameters": n_params,
        "best_run": {"name": best.trial, "epoch": round(best.epoch, 3), "val_loss": best.val,
                     "val_perplexity": perplexity(best.val)},
        "search": [{"name": r.trial.name, "epochs": r.trial.epochs, "lr": r.trial.lr,
                    "weight_decay": r.trial.weight_decay, "best_val_loss": r.best_val,
                    "best_epoch": round(r.best_epoch, 3), "completed": r.completed,
                    "diverged": r.failed, "seconds": round(r.seconds, 2),
                    "tokens_seen": r.extra.get("tokens_seen")} for r in results],
        "batch": f"{BATCH_ROWS} rows x {SEQ_LEN} tokens (packed documents: BOS text EOS)",
        "optimizer": {"name": "AdamW", "betas": ADAM_BETAS, "grad_clip": GRAD_CLIP,
                      "schedule": "linear warmup, cosine to 5% of peak"},
        "seed": args.seed,
        "data": {"fortunes": len(train_texts) + len(heldout), "train": len(train_texts),
                 "heldout": len(heldout), "evaluation": EVAL_DOCS,
                 "validation": len(heldout) - EVAL_DOCS, "train_stream_tokens": n_train_tokens,
                 "tokenizer_vocab": tok.get_vocab_size()},
    }
    save_checkpoint(model, tok, model_dir)
    write_json(os.path.join(model_dir, "eval.json"), dict(summary, status="trained; evaluation pending"))

    res = run_evaluation(model_dir, tok, heldout, device, summary, trained=model)
    log(f"held-out perplexity over {res['total_predicted']} tokens of {EVAL_DOCS} fortunes: "
        f"{res['perplexity']:.3f}; AutoTokenizer check: {res['hf_tokenizer_check']}")
    for entry in res.get("samples", {}).get("prompts", [])[:3]:
        log(f"sample: {entry['prompt']}{entry['continuations'][0]!r}")
    log(f"done: {model_dir}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Fatal as e:
        log(f"FATAL: {e}")
        sys.exit(2)
