"""The engine's calibration: a model folder's calibration.json (finetune --final, copied by serving.export)
applied to every probability the engine answers, and whether each answer clears the served threshold.

The math is textdata/calibration.py's, the same k-fold measured with. A folder without calibration.json
(exported before calibration existed) is served as before: scores as they are, every answer confident,
and info() says so. A calibrator fitted on the blend is not applied when the blend is not served
(`blend=False`): those are not the scores it was fitted on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from baseline.blend import TEXT_CAP
from baseline.ood import REASON, Typicality, load_ood
from serving.multilabel import Thresholds
from textdata.calibration import (
    CALIBRATION_FILE,
    Calibrator,
    confident,
    decision_thresholds,
    read_calibration,
)
from textdata.errors import ModelError
from textdata.labels import LabelSpace

NOT_CALIBRATED = (
    "no calibration.json (a model trained or exported before calibration): scores are served as "
    "they are and every answer counts as confident"
)


class OutOfDomainJob:
    """The detector's flags for a batch (call it), and the baseline's probabilities where it read the texts
    for both (`baseline`: None otherwise; else a callable giving them, the rows that carry a text)."""

    def __init__(self, n: int, rows: list[int], job, shared: bool = False):
        self.n, self.rows, self.job = n, rows, job
        self.baseline = (lambda: job.result()[1]) if shared else None

    def __call__(self) -> np.ndarray:
        away = np.zeros(self.n, bool)
        if self.job is not None:
            got = self.job.result()
            away[self.rows] = got[0] if self.baseline is not None else got
        return away


class ServedCalibration:
    """`calibration(probs)` calibrates; `calibration.confident(probs)` flags each row; `.info()` for /v1/model."""

    prior = None  # serving.prior.PriorCorrection in force (the server's --prior-correction), single-label

    def __init__(
        self,
        calibrator: Calibrator | None = None,
        thresholds: np.ndarray | None = None,
        spec: dict | None = None,
        why: str = NOT_CALIBRATED,
        ood: Typicality | None = None,
    ):
        self.calibrator, self.thresholds, self.spec, self.why = calibrator, thresholds, spec or {}, why
        self.ood = ood  # the folder's out-of-domain detector (ood/, baseline/ood.py), or None

    @classmethod
    def load(cls, folder: str | Path, labels: list[str], blend_served: bool,
             space: LabelSpace | None = None) -> ServedCalibration:
        """The folder's calibration as this engine serves it; ModelError (one line, naming the file and the
        field) for a broken file or one fitted for the other kind of model (`space`: this folder's)."""
        try:
            found = read_calibration(folder, list(labels), space)
            ood = load_ood(folder)
        except ValueError as e:
            raise ModelError(str(e)) from None
        if found is None:
            return cls(ood=ood)
        calibrator, thresholds, spec = found
        if spec.get("fitted_on") == "blend" and not blend_served:
            return cls(
                spec=spec,
                why=f"{CALIBRATION_FILE} was fitted on the blend, which is not served here "
                "(blend off): scores are the model's own and every answer counts as confident",
            )
        return cls(calibrator, thresholds, spec, why="", ood=ood)

    @property
    def applied(self) -> bool:
        return self.calibrator is not None

    def __call__(self, probs: np.ndarray) -> np.ndarray:
        p = probs if self.calibrator is None else self.calibrator(probs)
        prior = self.prior  # read once: the monitor's thread may swap it
        return p if prior is None else prior(p)

    def multi_label_thresholds(self, thresholds: Thresholds) -> Thresholds:
        """A multi-label folder's thresholds.json moved to the scale its scores are served: each label's
        calibration is increasing, so the label sets are the ones the uncalibrated thresholds cut."""
        if not self.applied or self.calibrator.method == "none":
            return thresholds
        return dataclasses.replace(
            thresholds,
            values=decision_thresholds(self.calibrator, thresholds.values),
            source=f"{thresholds.source}, moved through {CALIBRATION_FILE}'s calibrator",
        )

    def confident(self, probs: np.ndarray, asserted: np.ndarray | None = None,
                  min_confidence: float | None = None) -> np.ndarray:
        """Per row: does every label it asserts (`asserted`, (n, L) bool; by default its top label, a single-label
        answer) clear its (calibrated) threshold, or `min_confidence` where a caller names its own."""
        if min_confidence is not None:
            return confident(probs, np.full(np.shape(probs)[1], min_confidence), asserted)
        return confident(probs, self.thresholds if self.applied else None, asserted)

    def out_of_domain(self, texts: list[str]) -> np.ndarray:
        """Per text: is it unlike the training rows (never confident, whatever its score); all False
        without a detector in the folder."""
        if self.ood is None or not len(texts):
            return np.zeros(len(texts), bool)
        return ~self.ood.in_domain(list(texts))

    def start_out_of_domain(self, seqs, pool, blend=None) -> OutOfDomainJob:
        """`out_of_domain` for the texts that `seqs` (the engine's Encoded ids) carry, started in `pool`; call
        the answer for the flags, one per row (a row without its text: in domain). With the served `blend`
        whose baseline reads texts as the detector does (both fitted by --final on every row), the one read
        serves both: the answer's `baseline` gives the baseline's probabilities of those rows."""
        rows = [i for i, s in enumerate(seqs) if getattr(s, "text", None) is not None] if self.ood else []
        texts = [seqs[i].text for i in rows]
        if rows and blend is not None and self._reads_like(blend):
            def both():
                read = blend.baseline.read([t[:TEXT_CAP] for t in texts])
                return ~self.ood.in_domain(texts, read), blend.baseline_proba(texts, read.weights)

            return OutOfDomainJob(len(seqs), rows, pool.submit(both), shared=True)
        return OutOfDomainJob(len(seqs), rows, pool.submit(self.out_of_domain, texts) if rows else None)

    def _reads_like(self, blend) -> bool:
        if getattr(self, "_shared_with", None) is not blend:  # once per served blend: a vocabulary compare
            self._shared_with, self._shared = blend, self.ood.reads_like(blend.baseline)
        return self._shared

    def flags(self, probs: np.ndarray, away: np.ndarray, asserted: np.ndarray | None = None) -> tuple[np.ndarray, list]:
        """(confident per row, the reason per row where the score is not why: "out of domain" or None);
        `asserted` as `confident`'s."""
        return self.confident(probs, asserted) & ~away, [REASON if a else None for a in away]

    def info(self) -> dict:
        """What /v1/model and info()["calibration"] show: the method, the threshold, its target and the
        nested estimates k-fold made of them."""
        keep = (
            "problem_type",
            "method",
            "temperature",
            "params",
            "fitted_on",
            "threshold",
            "threshold_scope",
            "target_precision",
            "estimated_coverage",
            "estimated_precision",
            "confidence",
            "statement",
            "nested",
        )
        check = self.spec.get("prior_correction")
        out = {"calibrated": self.applied, **{k: self.spec[k] for k in keep if k in self.spec},
               "out_of_domain": None if self.ood is None else self.ood.info(),
               "prior_correction": ({"applied": False} if self.prior is None else self.prior.info())
               | ({"kfold_check": check} if check else {})}
        if not self.applied:
            out["why"] = self.why
            out["threshold"] = None
        elif self.thresholds is None:
            out["why"] = (
                "calibrated; no --target-precision was given to k-fold, so every answer counts as confident"
            )
        return out


def no_threshold_reason(cal) -> str:
    """Why a served model's calibration (`clf.calibration`, None for none) gives no threshold to be sure by
    ("" where it gives one): every answer then counts as `confident` on the API, which the UI must not show as a
    confident suggestion (the Label tab, Batch, team datasets' Accept)."""
    if getattr(cal, "applied", False) and getattr(cal, "thresholds", None) is not None:
        return ""
    return "calibrated, no threshold (no --target-precision)" if getattr(cal, "applied", False) else "not calibrated"
