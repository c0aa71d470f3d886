"""Learning-rate schedule and the small hyper-parameter search of train.py.

Pure standard library so that it is tested here, without torch.

Why a search at all: the corpus is small (~0.7 M tokens) and the model tiny (~4.7 M
parameters), so on an H200 one epoch takes about a second and the time budget allows
hundreds of epochs. The limit is over-fitting, not compute. The budget is therefore spent on
a few complete cosine runs (each from the same initialisation) that differ in length,
learning rate and weight decay; the run with the lowest validation loss wins. A run whose
validation loss was still falling at its end is followed by one twice as long.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Trial:
    name: str
    epochs: int
    lr: float
    weight_decay: float


@dataclass
class TrialResult:
    trial: Trial
    best_val: float            # lowest validation loss (nats / token) seen in the run
    best_epoch: float          # epochs of training done when it was seen
    completed: bool            # the whole schedule ran (not cut by the deadline)
    seconds: float             # wall time of the run, evaluation included
    seconds_per_epoch: float   # measured; plans the next run
    failed: bool = False       # diverged (non-finite loss)
    extra: dict = field(default_factory=dict)


def warmup_steps(total_steps: int) -> int:
    """5 % of the run, between 10 and 200 steps (never more than the run)."""
    return max(1, min(total_steps, max(10, min(200, total_steps // 20))))


def lr_at(step: int, total_steps: int, peak_lr: float, warmup: int,
          final_ratio: float = 0.05) -> float:
    """Linear warmup to peak_lr over `warmup` steps, then cosine decay to
    final_ratio * peak_lr at step total_steps - 1. step counts from 0."""
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {total_steps}")
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    span = max(1, total_steps - 1 - warmup)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    return peak_lr * (final_ratio + (1.0 - final_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


LADDER_PREFIX = "epochs-"
# A longer run must beat the previous one by this fraction of its loss to keep climbing.
LADDER_MIN_GAIN = 0.002
# The best validation loss counts as "at the end" when seen in the last quarter of the run.
LADDER_LATE_FRACTION = 0.75
# Keep this share of the remaining time free: measured epoch times vary a little.
PLAN_SAFETY = 0.92


def epochs_that_fit(remaining_s: float, seconds_per_epoch: float) -> int:
    if seconds_per_epoch <= 0:
        raise ValueError(f"seconds_per_epoch must be > 0, got {seconds_per_epoch}")
    return int(max(0.0, remaining_s) * PLAN_SAFETY / seconds_per_epoch)


def _ok(results: list[TrialResult]) -> list[TrialResult]:
    return [r for r in results if not r.failed and math.isfinite(r.best_val)]


def plan_next(results: list[TrialResult], base: Trial, remaining_s: float,
              seconds_per_epoch: float) -> Trial | None:
    """The next run to do, or None when the search is over.

    1. Epoch ladder at base.lr / base.weight_decay: base.epochs, then doubled while the
       previous run completed, had its best validation loss late in the run and improved on
       the run before it. A run that does not fit the remaining time is shortened to what
       fits (if that is still longer than the last rung).
    2. At the best ladder length: half and double the learning rate.
    3. At the best length and learning rate so far: three times the weight decay.
    Runs that do not fit the remaining time are skipped.
    """
    fit = epochs_that_fit(remaining_s, seconds_per_epoch)
    ladder = [r for r in results if r.trial.name.startswith(LADDER_PREFIX)]
    done_names = {r.trial.name for r in results}

    if not ladder:
        # The first run always happens, shortened to what fits (at least one epoch; if even
        # that does not fit, the deadline cuts it and its best checkpoint still counts).
        epochs = max(1, min(base.epochs, fit))
        return Trial(f"{LADDER_PREFIX}{epochs}", epochs, base.lr, base.weight_decay)

    ladder_over = any(not r.trial.name.startswith(LADDER_PREFIX) for r in results)
    if not ladder_over:
        last = ladder[-1]
        prev = ladder[-2] if len(ladder) >= 2 else None
        climb = (last.completed and not last.failed
                 and last.best_epoch >= LADDER_LATE_FRACTION * last.trial.epochs
                 and (prev is None or prev.failed
                      or last.best_val < prev.best_val * (1.0 - LADDER_MIN_GAIN)))
        if climb:
            epochs = min(2 * last.trial.epochs, fit)
            if epochs >= last.trial.epochs + max(1, last.trial.epochs // 4):
                name = f"{LADDER_PREFIX}{epochs}"
                if name not in done_names:
                    return Trial(name, epochs, base.lr, base.weight_decay)

    good_ladder = _ok(ladder)
    if not good_ladder:
        return None
    best_rung = min(good_ladder, key=lambda r: r.best_val)
    epochs = best_rung.trial.epochs
    if epochs > fit:
        return None

    for name, lr in (("lr-half", base.lr * 0.5), ("lr-double", base.lr * 2.0)):
        if name not in done_names:
            return Trial(name, epochs, lr, base.weight_decay)

    same_length = [r for r in _ok(results) if r.trial.epochs == epochs]
    best_lr = min(same_length, key=lambda r: r.best_val).trial.lr
    if "wd-x3" not in done_names:
        return Trial("wd-x3", epochs, best_lr, base.weight_decay * 3.0)
    return None
