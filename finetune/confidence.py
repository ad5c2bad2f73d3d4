"""k-fold's confidence step: calibrate what will be served, the coverage table, the served threshold for
--target-precision, the pictures, the table's lines, and calibration.json in the --final model folder.

Called by finetune/kfold.py after the blend (finetune/calibration.py, finetune/coverage.py; multi-label:
finetune/calibration_multilabel.py). What is calibrated is what is served: the blend's nested out-of-fold
probabilities where the blend is kept, else the model's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from finetune.calibration import calibrate
from finetune.coverage import DELTA, coverage_table, served_threshold
from finetune.prior_check import prior_check
from finetune.sharpness import line as sharpness_line
from textdata.calibration import CALIBRATION_FILE, Calibrator, calibrator_from_json
from textdata.labels import LabelSpace
from textdata.tables import write_json


def served_oof(oof: np.ndarray, blend: dict | None, blend_oof: np.ndarray | None) -> tuple[np.ndarray, str]:
    """(what the final folder serves, measured out of fold, as float64; "blend" or "model"): the blend's nested
    out-of-fold probabilities where it is kept, else the model's."""
    kept = bool(blend and blend.get("kept") and blend_oof is not None)
    served, fitted_on = (blend_oof, "blend") if kept else (oof, "model")
    return np.asarray(served, np.float64), fitted_on


def cv_calibration(
    oof: np.ndarray,
    blend: dict | None,
    blend_oof: np.ndarray | None,
    data,
    fold_of: np.ndarray,
    target: float | None,
    group_column: str | None = None,
    delta: float = DELTA,
) -> tuple[dict, np.ndarray, np.ndarray]:
    """Single-label: (report["calibration"], the served out-of-fold probabilities before, and after nested
    calibration). Multi-label's is finetune/calibration_multilabel.py's, through its task. With
    --group-column, the served threshold's bound holds over unseen groups (finetune/group_bound.py)."""
    served, fitted_on = served_oof(oof, blend, blend_oof)
    section, chosen, final = calibrate(served, data.y, fold_of, fitted_on)
    if fitted_on == "blend":  # for the record: the model alone, as --blend off would serve it
        alone = calibrate(np.asarray(oof, np.float64), data.y, fold_of, "model")[0]
        section["model_alone"] = {k: alone[k] for k in ("method", "why", "before", "after")}
    section["coverage"] = coverage_table(chosen, served, data.y, fold_of)
    section["prior_correction"] = prior_check(chosen.calibrated, data.y)  # whether --prior-correction may serve it
    if target is not None:
        section["served"] = served_threshold(chosen, final, served, data.y, fold_of, data.labels, target,
                                             delta, data.groups if group_column else None, group_column)
    return section, served, chosen.calibrated


def write_pictures(out: Path, section: dict, before: np.ndarray, after: np.ndarray, data) -> None:
    """Single-label: the reliability diagram and the coverage curve (top-label pictures)."""
    from finetune.calibration_plots import calibration_png, coverage_png

    calibration_png(before, after, data.y, section, out / "calibration.png")
    coverage_png(after, data.y, section["coverage"], out / "coverage.png")


def table_lines(section: dict | None) -> list[str]:
    """The printed table's calibration part: per fold before → after, mean ± std, coverage per target."""
    if not section:
        return []
    lines = [
        "",
        f"calibration ({section['why']}; fitted on the {section['fitted_on']}'s out-of-fold rows, nested)",
        (
            f"{'fold':>6} {'ECE before':>11} {'ECE after':>10} {'log-loss before':>16} {'after':>7} "
            f"{'Brier before':>13} {'after':>7}"
        ),
    ]
    for f in section["folds"]:
        b, a = f["before"], f["after"]
        lines.append(
            f"{f['fold']:>6} {b['ece']:>11.4f} {a['ece']:>10.4f} {b['log_loss']:>16.4f} {a['log_loss']:>7.4f} "
            f"{b['brier']:>13.4f} {a['brier']:>7.4f}"
        )
    b, a = section["before"], section["after"]
    pm = lambda d, k: f"{d[k + '_mean']:.4f}±{d[k + '_std']:.3f}"
    lines.append(
        f"{'mean':>6} {pm(b, 'ece'):>11} {pm(a, 'ece'):>10} {pm(b, 'log_loss'):>16} {pm(a, 'log_loss'):>7} "
        f"{pm(b, 'brier'):>13} {pm(a, 'brier'):>7}"
    )
    if section.get("ece_floor"):
        fl = section["ece_floor"]
        lines.append(f"{'floor':>6} {'':>11} {fl['mean']:>10.4f}  (ECE of perfectly calibrated scores on as many rows, "
                     f"95th percentile {fl['p95']:.4f}: an ECE at or under it is sampling noise)")
    if section.get("coverage"):
        lines += [
            "",
            "coverage at a precision (threshold chosen on the other folds, scored on the held-out fold)",
            f"{'target':>7} {'coverage':>14} {'precision':>14}",
        ]
        for row in section["coverage"]:
            prec = (
                "n/a"
                if row["precision_mean"] is None
                else f"{row['precision_mean']:.4f}±{row['precision_std']:.3f}"
            )
            lines.append(
                f"{row['target']:>7.2f} {row['coverage_mean']:>8.4f}±{row['coverage_std']:.3f} {prec:>14}"
            )
    if section.get("share"):
        lines.append(sharpness_line(section["share"]))
    if section.get("prior_correction"):
        lines.append(f"prior correction: {section['prior_correction']['why']}")
    served = section.get("served")
    if served:
        t = served["threshold"]
        shown = f"{t:.4f}" if isinstance(t, float) else served["scope"].replace("_", " ")  # per class, per label
        lines.append(
            f"served: target precision {served['target_precision']:g}, threshold {shown} "
            f"({served['scope']}), estimated coverage {served['estimated_coverage']:.4f}"
            f"±{served['estimated_coverage_std']:.3f} (nested)"
        )
        if served.get("statement"):
            lines.append(f"served: {served['statement']}")
        never = served.get("never_confident")
        if never:
            lines.append(f"never confident ({len(never)} of {len(served['threshold'])} labels: their rows do not reach "
                         f"{served['target_precision']:g}, threshold 1.0): {', '.join(never)}")
    return lines


def _problem_type(section: dict) -> str:
    return LabelSpace.recorded(section).problem_type  # the report section says "multi_label": true


def served_calibrator(section: dict | None, labels: list[str], blend_served: bool) -> Calibrator | None:
    """The calibrator the final folder serves (save_calibration writes it), or None where it writes none.
    A calibrator fitted on the blend is not served when the final model is served without it (its
    baseline could not be fitted): those scores are not the ones it was fitted on."""
    if not section or (section["fitted_on"] == "blend" and not blend_served):
        return None
    return calibrator_from_json({**section["final"], "problem_type": _problem_type(section)}, len(labels))


def save_calibration(
    folder: Path, section: dict | None, labels: list[str], blend_served: bool, warnings: list[str]
) -> dict | None:
    """calibration.json in the final model folder (what serving/calibration.py reads), single- or
    multi-label; what training_config.json records. None where served_calibrator serves none."""
    path = Path(folder) / CALIBRATION_FILE
    path.unlink(missing_ok=True)  # a rerun into the same folder must not serve an old one
    if served_calibrator(section, labels, blend_served) is None:
        if section:
            warnings.append(
                "final model: calibrated on the blend, which it is served without; no calibration.json"
            )
        return None
    served = section.get("served") or {}
    keys = ("ece", "log_loss", "brier")
    spec = {
        **section["final"],
        "problem_type": _problem_type(section),
        "labels": list(labels),
        "fitted_on": section["fitted_on"],
        "threshold": served.get("threshold"),
        "threshold_scope": served.get("scope"),
        "target_precision": served.get("target_precision"),
        "estimated_coverage": served.get("estimated_coverage"),
        "estimated_precision": served.get("estimated_precision"),
        "confidence": served.get("confidence"),
        "statement": served.get("statement"),
        "prior_correction": {k: v for k, v in (section.get("prior_correction") or {}).items() if k in ("wins", "why")}
        or None,
        # --calibration-share: the factor already in the parameters above, and the held-out rows it was fitted on
        "cooled": {k: (section.get("share") or {}).get(k) for k in ("tau", "rows", "final_trained_on")}
        if section.get("share") else None,
        "nested": {
            "folds": len(section["folds"]),
            "method_why": section["why"],
            **{f"{k}_{part}": section[part][f"{k}_mean"] for part in ("before", "after") for k in keys},
            "estimated_coverage_std": served.get("estimated_coverage_std"),
            "estimated_precision_std": served.get("estimated_precision_std"),
            "threshold_why": served.get("why"),
            "threshold_rule": served.get("rule"),
        },
    }
    write_json(path, spec)
    return {k: spec[k] for k in ("method", "threshold", "target_precision", "estimated_coverage")}


def fit_out_of_domain(data, fold_of: np.ndarray, targets: np.ndarray, sure: np.ndarray | None, warnings: list[str]):
    """(report["out_of_domain"], the detector --final carries): baseline/ood.py fitted on the out-of-fold rows,
    its cut costing at most MAX_DROP of the answers called confident (`sure`, the task's; None: of all rows, as
    multi-label's centroid per label does); ({"error"}, None) where it cannot be fitted. `targets` as the
    task's: class ids, or a (n, L) label matrix."""
    from baseline.ood import fit_typicality

    try:
        typ, meta = fit_typicality(data.texts, targets, fold_of, len(data.labels), sure)
    except ValueError as e:  # no usable characters in a fold (empty vocabulary) and the like
        warnings.append(f"out-of-domain detector not fitted: {str(e).splitlines()[0]}")
        return {"error": str(e).splitlines()[0]}, None
    return {"method": typ.info()["method"], "cut": typ.cut, "combine": typ.combine, **meta}, typ


def out_of_domain_lines(section: dict | None) -> list[str]:
    if not section or "error" in section:
        return []
    how = section.get("method", "TF-IDF typicality (nearest training rows and class centroids)")  # older reports
    return [(f"out of domain: a text less typical than all but {section['cut']:.1%} of the training rows, by "
             f"{how}, is never confident; out of fold that flags "
             f"{section['out_of_fold_flagged']:.3f} of the rows and costs {section['out_of_fold_confident_lost']:.3f} "
             f"of the {section['out_of_fold_confident']:.3f} answered confidently")]
