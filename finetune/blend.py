"""The k-fold side of the blend (baseline/blend.py): its nested estimate, the keep-or-not rule, the report."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np

from baseline.blend import (
    BASELINE_DIR,
    BaselineError,
    Blend,
    fit_baseline,
    fit_blend,
    nested_blend,
    save_baseline,
)
from finetune.metrics import fold_metrics, summarize
from textdata.nested import fold_masks

METHOD = "log-linear pool: p ∝ exp(a·log p_model + b·log p_baseline), a, b fitted by log-loss"


def cv_blend(oof: np.ndarray, base_oof: np.ndarray, y: np.ndarray, fold_of: np.ndarray, labels: list[str],
             mode: str, model_f1_mean: float) -> tuple[dict | None, np.ndarray | None]:
    """(report["blend"], nested blended out-of-fold probabilities) or (None, None) with --blend off.

    Each fold is blended with parameters fitted on the other folds' out-of-fold rows (nested), so the
    per-fold scores never saw their own rows; `params` is the fit on every row, which the final model
    serves. `kept`: `on` always, `auto` where the nested mean macro-F1 beats the model's."""
    if mode == "off":
        return None, None
    section = {"method": METHOD, "mode": mode, "kept": False}
    if np.isnan(base_oof).any():
        section["why"] = "the baseline could not be fitted in every fold (see baseline.folds); the model is left alone"
        return section, None
    blended, per_fold = nested_blend(oof, base_oof, y, fold_of)
    folds = []
    for (k, held, _), params in zip(fold_masks(fold_of), per_fold):
        folds.append({"fold": int(k), "model_weight": params.model_weight, "baseline_weight": params.baseline_weight,
                      **fold_metrics(y[held], blended[held].argmax(1), labels)})
    final = fit_blend(oof, base_oof, y)
    section.update(folds=folds, **summarize(folds), model_weight=final.model_weight,
                   baseline_weight=final.baseline_weight)
    section["lift_vs_model"] = section["macro_f1_mean"] - model_f1_mean
    section["kept"] = mode == "on" or section["lift_vs_model"] > 0
    section["why"] = ("--blend on" if mode == "on" else
                      f"nested macro-F1 {section['macro_f1_mean']:.4f} {'>' if section['kept'] else '<='} "
                      f"the model's {model_f1_mean:.4f}")
    return section, blended


def save_final_blend(folder: Path, texts: list[str], y: np.ndarray, n_classes: int, seed: int, section: dict | None,
                     warnings: list[str]) -> dict | None:
    """With a kept blend: the baseline refitted on every row, saved in folder/baseline/ with the blend
    parameters and their nested score; what training_config.json records. A baseline that cannot be fitted
    leaves the model alone (a warning, no blend)."""
    shutil.rmtree(folder / BASELINE_DIR, ignore_errors=True)  # a rerun into the same folder must not serve an old one
    if not section or not section["kept"]:
        return None
    try:
        baseline = fit_baseline(texts, y, seed)
    except BaselineError as e:
        warnings.append(f"final model: the TF-IDF baseline could not be fitted on all rows ({e}); served without blend")
        return None
    meta = {"method": section["method"], "nested_macro_f1_mean": section["macro_f1_mean"],
            "nested_macro_f1_std": section["macro_f1_std"], "lift_vs_model": section["lift_vs_model"],
            "kept_because": section["why"]}
    blend = Blend(section["model_weight"], section["baseline_weight"])
    save_baseline(baseline, folder, n_classes, blend, meta)
    return {**asdict(blend), **meta, "path": BASELINE_DIR}
