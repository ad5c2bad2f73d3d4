"""The baseline every k-fold report shows beside the model, per fold (its definition: blend.py, which serving
shares to apply the blend)."""

from __future__ import annotations

import numpy as np

from baseline.blend import baseline_proba, fit_baseline


def baseline_predict(texts: list[str], y: np.ndarray, train: np.ndarray, val: np.ndarray, seed: int) -> np.ndarray:
    """Class probabilities for `val` from a baseline fit on `train` (columns = all label ids);
    BaselineError where it cannot be fitted."""
    model = fit_baseline([texts[i] for i in train], y[train], seed)
    return baseline_proba(model, [texts[i] for i in val], int(y.max()) + 1)
