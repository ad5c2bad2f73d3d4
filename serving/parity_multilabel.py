"""The INT8 gate on a multi-label model's served answers (issue 44): what `serving/parity.py` judges for a
single-label file, per label decision.

A user of a multi-label model sees label sets: each label is in where its served score (sigmoid, the folder's
blend and calibration) is over its served threshold. A file's decisions are judged against PyTorch fp32's:
- on the decisions fp32 is confident of: every decision of a row calibration.json calls confident (each asserted
  label over its precision threshold), or without such thresholds a served score of at least --confident-score
  either way (p >= s: surely in; p <= 1 - s: surely out);
- beyond near-ties: decisions whose fp32 served score is more than --near-tie-margin from the threshold (a
  decision that flips on a score next to its threshold is noise a user cannot tell from the model's own);
- with labeled rows: the multi-label macro-F1 of the served decisions and the mean per-label ECE of the served
  scores, against fp32's.
The keys are the single-label ones (parity.served_line and served_verdict read both); `unit` says what is counted.
"""

from __future__ import annotations

import numpy as np

from serving.parity_stats import agreement_stats
from textdata.calibration import binary_ece


def confident_decisions(clf, probs: np.ndarray, confident_score: float) -> tuple[np.ndarray, str]:
    """(n, L) bool: the decisions fp32 is confident of, and the rule in words (export_report.json's)."""
    thresholds = np.asarray(clf.thresholds)
    if clf.calibration.applied and clf.calibration.thresholds is not None:
        rows = clf.calibration.confident(probs, probs > thresholds[None, :])
        return np.repeat(rows[:, None], probs.shape[1], 1), \
            "every decision of a row whose asserted labels clear their precision thresholds (calibration.json)"
    sure = np.maximum(probs, 1 - probs) >= confident_score
    return sure, f"served score >= {confident_score:g} or <= {1 - confident_score:g}"


def _f1_ece(y: np.ndarray, probs: np.ndarray, thresholds: np.ndarray) -> tuple[float, float]:
    from sklearn.metrics import f1_score

    f1 = f1_score(y, (probs > thresholds[None, :]).astype(np.int8), average="macro", zero_division=0)
    ece = float(np.mean([binary_ece(probs[:, j], y[:, j]) for j in range(y.shape[1])]))
    return float(f1), ece


def served_stats_multi_label(ref, got_logits: np.ndarray, near_tie_margin: float) -> dict:
    """`parity.served_stats` for a multi-label `ref` (a ServedReference with `thresholds`)."""
    got = ref.to_served(got_logits)
    t = ref.thresholds[None, :]
    same = (ref.probs > t) == (got > t)
    distance = np.abs(ref.probs - t)
    stats = agreement_stats(ref, got, same, distance, near_tie_margin)
    out = {"unit": "label decisions", "agreement": stats.pop("agreement"), "row_agreement": float(same.all(1).mean()),
           **stats}
    if ref.y is not None:
        (f1_ref, ece_ref), (f1, ece) = (_f1_ece(ref.y, p, ref.thresholds) for p in (ref.probs, got))
        out.update(macro_f1=f1, macro_f1_reference=f1_ref, macro_f1_change_points=100 * (f1 - f1_ref),
                   ece=ece, ece_reference=ece_ref, ece_change_points=100 * (ece - ece_ref))
    return out
