"""Whether the fine-tuned model learned anything its answers show, said plainly wherever the model appears.

Issue 31: the README's first try (1 epoch) scored macro-F1 0.036, the blend fitted the model's weight to 0, and
the server answered with the TF-IDF baseline's confidences (0.63-0.998) as if a model had learned them. Two
findings, measured by k-fold on out-of-fold rows (finetune/kfold.py) and recorded with the final model
(training_config.json `learned`), then repeated by serving.export's report and the engine's info() (so
`/v1/model`):

- at chance level: the model's out-of-fold macro-F1 is no higher than the 95th percentile of the macro-F1 its
  own predictions get when paired with shuffled labels (a permutation test: predictions with that spread,
  unrelated to the texts, score this much by luck);
- adds nothing: the blend is served and gives the model no weight (under 1% of the baseline's), or the model
  is at chance level, so the answers are the baseline's.

numpy only: the slim serving image reads the record without scikit-learn.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from textdata.model_files import TRAINING_CONFIG as CONFIG_FILE  # finetune --final records it

ADDS_NOTHING = "the model adds nothing; answers are the TF-IDF baseline's"
AT_CHANCE = "the model learned nothing: its answers are at chance level"
PERMUTATIONS = 200
NO_WEIGHT = 0.01  # the model's blend weight, as a share of the baseline's, below which it counts as none


def macro_f1(y: np.ndarray, pred: np.ndarray, n_classes: int) -> float:
    """Macro-F1 over the classes present in `y` or `pred` (scikit-learn's rule with zero_division=0)."""
    cm = np.bincount(y * n_classes + pred, minlength=n_classes * n_classes).reshape(n_classes, n_classes)
    tp = np.diag(cm).astype(float)
    denom = cm.sum(0) + cm.sum(1)  # 2tp + fp + fn
    present = denom > 0
    return float(np.mean(2 * tp[present] / denom[present])) if present.any() else 0.0


def chance_macro_f1(y: np.ndarray, pred: np.ndarray, n_classes: int, seed: int = 0,
                    permutations: int = PERMUTATIONS) -> float:
    """The 95th percentile of macro-F1 with `y` shuffled against `pred`: what these predictions score by luck."""
    rng = np.random.default_rng(seed)
    scores = [macro_f1(rng.permutation(y), pred, n_classes) for _ in range(permutations)]
    return float(np.percentile(scores, 95))


def assess(y: np.ndarray, oof: np.ndarray, blend: dict | None, n_classes: int, seed: int = 0) -> dict:
    """k-fold's finding from the out-of-fold probabilities `oof` and report["blend"]: report.json's and
    training_config.json's `learned`, with `message` None when the model did learn something it shows."""
    y, pred = np.asarray(y, dtype=np.int64), np.asarray(oof).argmax(1).astype(np.int64)
    f1, chance = macro_f1(y, pred, n_classes), chance_macro_f1(y, pred, n_classes, seed)
    at_chance = f1 <= chance
    kept = bool(blend and blend.get("kept"))
    share = None
    if kept and isinstance(blend.get("baseline_weight"), (int, float)) and blend["baseline_weight"] > 0:
        share = float(blend["model_weight"]) / float(blend["baseline_weight"])
    adds_nothing = kept and (at_chance or (share is not None and share < NO_WEIGHT))
    found = {"macro_f1": round(f1, 4), "chance_macro_f1_p95": round(chance, 4), "at_chance": at_chance,
             "blend_kept": kept, "model_weight_share": None if share is None else round(share, 4),
             "adds_nothing": adds_nothing}
    found["message"] = message(found, blended=kept)
    return found


def multi_label_macro_f1(Y: np.ndarray, pred: np.ndarray) -> float:
    """Mean per-label F1 over the labels present in `Y` or `pred` (0/1 arrays, n x L)."""
    tp = (Y & pred).sum(0).astype(float)
    denom = Y.sum(0) + pred.sum(0)  # 2tp + fp + fn
    present = denom > 0
    return float(np.mean(2 * tp[present] / denom[present])) if present.any() else 0.0


def assess_multi(Y: np.ndarray, pred: np.ndarray, blend: dict | None, seed: int = 0,
                 permutations: int = PERMUTATIONS) -> dict:
    """`assess` for multi-label runs: `pred` the nested predicted sets (n x L, each fold cut at thresholds tuned
    on the others). Chance: rows of `Y` shuffled against `pred`, so each label's frequency and the labels'
    co-occurrence stay as they are. Adds nothing: the kept blend gives the model under NO_WEIGHT of the
    baseline's weight on every label."""
    Y, pred = np.asarray(Y, dtype=np.int64), np.asarray(pred, dtype=np.int64)
    rng = np.random.default_rng(seed)
    f1 = multi_label_macro_f1(Y, pred)
    chance = float(np.percentile([multi_label_macro_f1(Y[rng.permutation(len(Y))], pred)
                                  for _ in range(permutations)], 95))
    at_chance = f1 <= chance
    kept = bool(blend and blend.get("kept"))
    share = None
    a, b = (np.asarray((blend or {}).get(k) or [], dtype=float) for k in ("model_weight", "baseline_weight"))
    if kept and a.shape == b.shape and a.size and np.all(b > 0):
        share = float(np.max(a / b))  # the label where the model weighs most
    adds_nothing = kept and (at_chance or (share is not None and share < NO_WEIGHT))
    found = {"macro_f1": round(f1, 4), "chance_macro_f1_p95": round(chance, 4), "at_chance": at_chance,
             "blend_kept": kept, "model_weight_share": None if share is None else round(share, 4),
             "adds_nothing": adds_nothing}
    found["message"] = message(found, blended=kept)
    return found


def message(found: dict | None, blended: bool) -> str | None:
    """The plain sentence for a recorded finding, as the answers are served (with the blend or without)."""
    if not found:
        return None
    # "the fine-tuned model alone": next to a served blend the figure read as the answers' score (issue 59, D8)
    why = (f"the fine-tuned model alone: macro-F1 {found['macro_f1']:.4f} on all out-of-fold rows; with the labels "
           f"shuffled its answers score up to {found['chance_macro_f1_p95']:.4f}" if found.get("at_chance") else
           f"the blend gives the model {found.get('model_weight_share') or 0:.2%} of the baseline's weight")
    if blended and found.get("adds_nothing"):
        return f"{ADDS_NOTHING} ({why})"
    if found.get("at_chance"):
        return f"{AT_CHANCE} ({why})"
    return None


def folder_note(folder: str | Path, blended: bool) -> str | None:
    """What a model folder's record says (training_config.json `learned`), for the answers as served; a folder
    from before the record: a served blend with no model weight still says so."""
    try:
        config = json.loads((Path(folder) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("learned"), dict):
        return message(config["learned"], blended)
    blend = config.get("blend") or {}
    a, b = blend.get("model_weight", 0), blend.get("baseline_weight")
    # one weight pair (single-label); a multi-label blend's per-label weights are not read here
    if blended and isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 and a / b < NO_WEIGHT:
        return message({"adds_nothing": True, "model_weight_share": a / b}, blended)
    return None
