"""Served probabilities moved to the class mix the texts have now (Saerens et al. 2002; the EM and the test are
textdata/prior_shift.py). The server's monitor estimates the mix over its window of answers and, with
`--prior-correction`, puts a correction in force only where the measured rule says it wins (textdata/prior_shift.py
`should_correct`: enough answers and a mix that moved by the likelihood-ratio test; docs/notes/log.md); it takes
it away when the mix comes back. Single-label only: a multi-label model's labels are not one distribution.

The correction is applied after the calibrator, so thresholds and "confident" read corrected scores; the monitor
undoes it on the answers it counts, so the next estimate is made on the calibrated scores, not on its own output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from textdata.prior_shift import SHIFT_LEVEL, adjust


@dataclass(frozen=True)
class PriorCorrection:
    """p(c | x) prior(c) / fitted(c), renormalised: `fitted` the training mix the scores are calibrated for,
    `prior` the mix estimated on `rows` served answers."""

    labels: tuple
    fitted: np.ndarray
    prior: np.ndarray
    rows: int
    p_value: float

    def __call__(self, probs: np.ndarray) -> np.ndarray:
        return adjust(probs, self.fitted, self.prior)

    def undo(self, probs: np.ndarray) -> np.ndarray:
        """The calibrated scores a corrected answer came from."""
        return adjust(probs, self.prior, self.fitted)

    def info(self) -> dict:
        return {"applied": True, "rows": self.rows, "p_value": self.p_value,
                "mix": dict(zip(self.labels, np.round(self.prior, 4).tolist())),
                "training_mix": dict(zip(self.labels, np.round(self.fitted, 4).tolist())),
                "why": f"the class mix of the last {self.rows} answers moved from the training mix (likelihood-"
                       f"ratio p = {self.p_value:.3g} < {SHIFT_LEVEL}): scores are corrected to it (Saerens et al. 2002)"}
