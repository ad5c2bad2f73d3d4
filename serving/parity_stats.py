"""The agreement figures the INT8 gate reports for both kinds of labels (serving/parity.py single-label,
serving/parity_multilabel.py multi-label): one place, so the two verdicts read the same keys."""

from __future__ import annotations

import numpy as np


def share(mask: np.ndarray, rows: np.ndarray) -> float | None:
    return float(mask[rows].mean()) if rows.any() else None


def agreement_stats(ref, got: np.ndarray, same: np.ndarray, margin: np.ndarray, near_tie_margin: float) -> dict:
    """What both kinds report of served answers: `same`, where fp32's answer (a row's top label, or a label
    decision) is kept; `margin`, its distance from changing (top-2 gap, or distance to the threshold)."""
    decided = margin > near_tie_margin
    return {
        "agreement": float(same.mean()),
        "confident_rule": ref.confident_rule,
        "confident_rows": int(ref.confident.sum()),
        "confident_agreement": share(same, ref.confident),
        "near_tie_margin": near_tie_margin,
        "near_tie_rows": int((~decided).sum()),
        "changed_in_near_ties": int((~same & ~decided).sum()),
        "changed_beyond_near_ties": int((~same & decided).sum()),
        "beyond_near_tie_agreement": share(same, decided),
        "largest_changed_margin": float(margin[~same].max()) if (~same).any() else None,
        "max_abs_score_diff": float(np.abs(ref.probs - got).max()),
    }
