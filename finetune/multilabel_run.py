"""k-fold's multi-label side (--multi-label): a fold's scores, the report with nested thresholds, the baseline and
the per-label blend, the held-out rows, the outputs and the final model's thresholds.json and baseline/.

finetune/kfold.py calls these where the single-label path calls finetune/report.py and finetune/blend.py; the
numbers come from finetune/multilabel.py (metrics, thresholds) and baseline/label_blend.py (baseline, blend).

Nested everywhere: fold k's tuned score uses thresholds tuned on the other folds' rows; its blend uses weights
fitted on the other folds' rows, and thresholds tuned on those rows blended with those weights.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from baseline.blend import BaselineError, nested_blend
from baseline.label_blend import fit_label_blend, fit_ovr_baseline, ovr_proba
from finetune.calibration_multilabel import calibrate_labels
from finetune.confidence import served_oof
from finetune.confidence import table_lines as calibration_lines
from finetune.label_issues import MultiLabelIssues, table_lines
from finetune.multilabel import (
    DEFAULT,
    GRID,
    multilabel_metrics,
    nested_thresholds,
    predict_sets,
    scored,
    summarize,
    tune_thresholds,
)
from finetune.multilabel_data import combination_counts
from finetune.outputs import fold_pictures, prob_columns, row_notes
from textdata.learned import assess_multi
from textdata.model_files import THRESHOLDS as THRESHOLDS_FILE
from textdata.nested import fold_masks, nested
from textdata.tables import write_json, write_table

BASELINE_NAME = "char TF-IDF + one-vs-rest logistic regression"
BLEND_METHOD = ("log-linear pool per label: logit p = a_j·logit p_model + b_j·logit p_baseline, a_j, b_j >= 0 "
                "fitted by log-loss")


def fold_scores(data, targets, train_idx, val_idx, proba, seed) -> tuple[np.ndarray, dict, dict]:
    """(the baseline's probabilities on the fold, the model's metrics at 0.5, the baseline's) for a fold record.
    A fold's own record can only use 0.5: tuned thresholds need the other folds (cv_report). The baseline trains
    on the fold's `targets` (with --teacher-column: teacher rows corrected on the fold's own gold rows only)."""
    Y = data.Y
    try:
        base = fit_ovr_baseline([data.texts[i] for i in train_idx], targets[train_idx], seed)
        base_proba = ovr_proba(base, [data.texts[i] for i in val_idx])
        base_metrics = {"threshold": DEFAULT, **multilabel_metrics(Y[val_idx], predict_sets(base_proba, DEFAULT),
                                                                   data.labels)}
    except BaselineError as e:
        base_proba, base_metrics = np.full_like(proba, np.nan), {"error": str(e)}
    model = {"threshold": DEFAULT, **multilabel_metrics(Y[val_idx], predict_sets(proba, DEFAULT), data.labels)}
    return base_proba, model, base_metrics


def fold_line(k: int, saved: dict) -> str:
    base = saved["baseline"]
    return (f"fold {k}: at 0.5 micro-F1 {saved['micro_f1']:.4f}, macro-F1 {saved['macro_f1']:.4f} (baseline "
            f"{'n/a' if 'error' in base else format(base['macro_f1'], '.4f')}), best epoch {saved['best_epoch']}")


# ------------------------------------------------------------------------------------------- the report
def _nested_sets(oof, base_oof, Y, fold_of) -> tuple[np.ndarray, np.ndarray, list, list]:
    """(blended out-of-fold probabilities, predicted sets, per-fold weights, per-fold thresholds): fold k blended
    with weights fitted on the other folds (baseline/blend.py's nested_blend), its sets cut at thresholds tuned on
    those folds blended with the same weights."""
    blended, params = nested_blend(oof, base_oof, Y, fold_of, fit=fit_label_blend)
    blends = iter(params)  # fold order, as nested() visits the folds
    pred, thresholds = nested(fold_of, lambda rest: tune_thresholds(Y[rest], next(blends)(oof[rest], base_oof[rest])),
                              lambda t, held: predict_sets(blended[held], t), np.zeros(np.shape(Y), np.int64))
    return blended, pred, params, thresholds


def _blend_section(cfg, oof, base_oof, Y, fold_of, labels, model_macro: float):
    if cfg.blend == "off":
        return None, None, None
    section = {"method": BLEND_METHOD, "mode": cfg.blend, "kept": False}
    if np.isnan(base_oof).any():
        section["why"] = "the baseline could not be fitted in every fold (see baseline.folds); the model is left alone"
        return section, None, None
    blended, pred, params, thresholds = _nested_sets(oof, base_oof, Y, fold_of)
    folds, plain = [], []
    for (k, held, _), p, t in zip(fold_masks(fold_of), params, thresholds):
        folds.append({"fold": int(k), "model_weight": list(p.model_weight), "baseline_weight": list(p.baseline_weight),
                      **multilabel_metrics(Y[held], pred[held], labels), "thresholds": dict(zip(labels, map(float, t)))})
        plain.append({"fold": int(k), **multilabel_metrics(Y[held], predict_sets(blended[held], DEFAULT), labels)})
    final = fit_label_blend(oof, base_oof, Y)
    section.update(folds=folds, **summarize(folds), at_0_5={"folds": plain, **summarize(plain)},
                   model_weight=list(final.model_weight), baseline_weight=list(final.baseline_weight))
    section["lift_vs_model"] = section["macro_f1_mean"] - model_macro
    section["kept"] = cfg.blend == "on" or section["lift_vs_model"] > 0
    section["why"] = ("--blend on" if cfg.blend == "on" else
                      f"nested tuned macro-F1 {section['macro_f1_mean']:.4f} {'>' if section['kept'] else '<='} "
                      f"the model's {model_macro:.4f}")
    return section, blended, final


def cv_report(cfg, got, data, recorded: dict, prep, device) -> tuple[dict, np.ndarray | None]:
    """report.json for a multi-label run (and the nested blended out-of-fold probabilities, or None)."""
    Y, labels, fold_of = data.Y, data.labels, got.fold_of
    model = scored(Y, got.oof, fold_of, labels)
    folds = []
    for r, tuned, plain in zip(got.results, model["folds"], model["at_0_5"]["folds"]):
        record = {k: v for k, v in r.items() if k not in ("baseline", "threshold", "per_label", "fold")
                  and k not in model["at_0_5"]["folds"][0]}
        folds.append({"fold": r["fold"], **record, "tuned": {k: v for k, v in tuned.items() if k != "fold"},
                      "at_0_5": {k: v for k, v in plain.items() if k != "fold"}})
    report = {
        "model": cfg.model, "resolved_model": prep.resolved, "data": str(prep.data_path), "labels": labels,
        "multi_label": True, "label_sep": data.label_sep, "n_rows": len(data.table), "n_used": len(data.texts),
        "dropped": data.dropped, **combination_counts(Y),
        "thresholds": {"rule": "label j predicted where p_j > t_j", "tuned": "per label, best F1 on out-of-fold rows",
                       "scored": "nested: fold k with thresholds tuned on the other folds' rows",
                       "grid": [float(GRID[0]), float(GRID[-1]), 0.01]},
        "folds": folds, **{k: v for k, v in model.items() if k.endswith(("_mean", "_std"))},
        "at_0_5": {k: v for k, v in model["at_0_5"].items() if k != "folds"},
        "baseline": {"name": BASELINE_NAME, "folds": [r["baseline"] for r in got.results]},
        "config": recorded, "seed": cfg.seed, "device": str(device), "warnings": [],
    }
    failed = [f"fold {r['fold']}: {r['baseline']['error']}" for r in got.results if "error" in r["baseline"]]
    if failed:
        report["warnings"].append(f"the TF-IDF baseline could not be fitted in {'; '.join(failed)}")
    else:
        base = scored(Y, got.base_oof, fold_of, labels)
        report["baseline"].update(folds=base["folds"], **{k: v for k, v in base.items() if k.endswith(("_mean", "_std"))},
                                  at_0_5={k: v for k, v in base["at_0_5"].items() if k != "folds"})
        report["lift_macro_f1"] = report["macro_f1_mean"] - report["baseline"]["macro_f1_mean"]
    report["blend"], blend_oof, final_blend = _blend_section(cfg, got.oof, got.base_oof, Y, fold_of, labels,
                                                             report["macro_f1_mean"])
    kept = bool(report["blend"] and report["blend"]["kept"])
    served = final_blend(got.oof, got.base_oof) if kept else got.oof
    report["thresholds"].update(source="blend" if kept else "model",
                                final=dict(zip(labels, map(float, tune_thresholds(Y, served)))),
                                model=dict(zip(labels, map(float, tune_thresholds(Y, got.oof)))))
    if not failed:  # what the --final baseline is cut at on held-out rows
        report["baseline"]["thresholds"] = dict(zip(labels, map(float, tune_thresholds(Y, got.base_oof))))
    return report, blend_oof


def fold_decisions(report: dict) -> np.ndarray:
    """Each fold's nested decision thresholds for what is served (the blend's where kept), one row per fold in
    fold order: where the nested coverage estimate of a --target-precision cuts (finetune/confidence.py)."""
    blend = report["blend"] or {}
    folds = blend["folds"] if blend.get("kept") else [f["tuned"] for f in report["folds"]]
    return np.array([[f["thresholds"][n] for n in report["labels"]] for f in folds], np.float64)


def _joined(pred: np.ndarray, labels: list[str], sep: str) -> np.ndarray:
    return np.array([sep.join(labels[j] for j in np.flatnonzero(row)) for row in pred], dtype=object)


# ------------------------------------------------------------------------------------------- held-out rows
def _both(Y, proba, thresholds, labels) -> dict:
    """Metrics at `thresholds`, and at 0.5 beside them."""
    return {**multilabel_metrics(Y, predict_sets(proba, thresholds), labels),
            "at_0_5": multilabel_metrics(Y, predict_sets(proba, DEFAULT), labels)}


def holdout_entry(out: Path, data, held, cfg, report: dict) -> dict:
    """report.json's held-out entry: the baseline refitted on every fold row, cut at the thresholds tuned on its
    out-of-fold rows; the final model is scored in final_extras."""
    entry = {"path": str(out / "holdout.csv"), "fraction": cfg.holdout, "n_rows": len(held.texts),
             "rows_without_label": int((held.Y.sum(1) == 0).sum()),
             "scored": "final model" if cfg.final else "baseline only (no --final, so no final model to score)"}
    try:
        if "thresholds" not in report["baseline"]:
            raise BaselineError("no out-of-fold baseline to tune its thresholds on")
        base = fit_ovr_baseline(data.texts, data.Y, cfg.seed)
        t = [report["baseline"]["thresholds"][n] for n in data.labels]
        entry["baseline"] = _both(held.Y, ovr_proba(base, held.texts), t, data.labels)
    except BaselineError as e:
        entry["baseline"] = {"error": str(e)}
    return entry


def final_extras(folder: Path, out: Path, data, held, proba, cfg, report: dict) -> dict | None:
    """What a multi-label model folder carries besides the model: thresholds.json (tuned on every out-of-fold row)
    and, with a kept blend, baseline/ (refitted on every row). With --holdout, the folder is scored as served
    (the blend read back from baseline/) and its answers written to OUTPUT/holdout_predictions.csv.
    Returns the blend's entry for training_config.json, or None."""
    import shutil

    from baseline.blend import BASELINE_DIR, ServedBlend
    from baseline.label_blend import LabelBlend, save_ovr_baseline

    shutil.rmtree(folder / BASELINE_DIR, ignore_errors=True)  # a rerun into the same folder must not serve an old one
    section, labels, blend = report["blend"], data.labels, None
    if section and section["kept"]:
        try:
            baseline = fit_ovr_baseline(data.texts, data.Y, cfg.seed)
            meta = {"method": section["method"], "nested_macro_f1_mean": section["macro_f1_mean"],
                    "nested_macro_f1_std": section["macro_f1_std"], "lift_vs_model": section["lift_vs_model"],
                    "kept_because": section["why"]}
            save_ovr_baseline(baseline, folder, LabelBlend(tuple(section["model_weight"]),
                                                           tuple(section["baseline_weight"])), meta)
            blend = {"model_weight": section["model_weight"], "baseline_weight": section["baseline_weight"], **meta,
                     "path": BASELINE_DIR}
        except BaselineError as e:
            report["warnings"].append(f"final model: the TF-IDF baseline could not be fitted on all rows ({e}); "
                                      "served without blend, at the model's thresholds")
    source = "blend" if blend else "model"
    thresholds = report["thresholds"]["final" if blend or report["thresholds"]["source"] == "model" else "model"]
    write_json(folder / THRESHOLDS_FILE, {"labels": labels, "thresholds": [thresholds[n] for n in labels],
                                          "default": DEFAULT, "tuned": True, "label_sep": data.label_sep,
                                          "source": source, "tuned_on": f"{len(data.texts)} out-of-fold rows"})
    if held is not None:
        served = ServedBlend(folder, len(labels))(proba, held.texts) if blend else proba
        shown = _holdout_calibration(report, held, served, blend is not None)  # the scores as served
        t = [thresholds[n] for n in labels]
        model_t = [report["thresholds"]["model"][n] for n in labels]
        entry = report["holdout"]
        entry.update(served=source, **_both(held.Y, served, t, labels), model=_both(held.Y, proba, model_t, labels))
        if blend:
            entry["blend"] = _both(held.Y, served, t, labels)
        entry["tuned_beats_0_5"] = {k: entry[k] > entry["at_0_5"][k] for k in ("micro_f1", "macro_f1")}
        rows = data.table.iloc[held.keep].copy()
        rows["pred_labels"] = _joined(predict_sets(served, t), labels, data.label_sep)
        for j, name in enumerate(labels):
            rows[f"prob_{name}"] = shown[:, j]
        write_table(rows, out / "holdout_predictions.csv")
        print(f"holdout ({len(held.texts)} rows never trained on), served {source}: micro-F1 {entry['micro_f1']:.4f} "
              f"tuned vs {entry['at_0_5']['micro_f1']:.4f} at 0.5, macro-F1 {entry['macro_f1']:.4f} vs "
              f"{entry['at_0_5']['macro_f1']:.4f}", file=sys.stderr)
    return blend


def _holdout_calibration(report: dict, held, served: np.ndarray, blend_served: bool) -> np.ndarray:
    """The held-out rows' scores as the folder serves them: calibrated where it has calibration.json, with the
    calibration before and after in report["holdout"]. The sets are still cut on the uncalibrated scores: each
    label's calibration is increasing and the engine moves the thresholds with it, so they are the same."""
    from finetune.calibration_multilabel import scores
    from finetune.confidence import served_calibrator

    cal = served_calibrator(report.get("calibration"), report["labels"], blend_served)
    if cal is not None:
        after = cal(np.asarray(served, np.float64))
        report["holdout"]["calibration"] = {"method": cal.method, "before": scores(served, held.Y),
                                            "after": scores(after, held.Y)}
        return after
    return served


def served_reference(folder: Path, raw_oof: np.ndarray, calibrated_oof: np.ndarray) -> tuple[np.ndarray, list]:
    """(out-of-fold probabilities, thresholds) on the scale the folder serves, for the drift reference
    (textdata/drift.py): with calibration.json, the nested-calibrated rows and thresholds.json's thresholds
    moved through the calibrator, as the engine moves them; else the scores and thresholds.json as they are."""
    import json

    from textdata.calibration import decision_thresholds, read_calibration

    spec = json.loads((Path(folder) / THRESHOLDS_FILE).read_text(encoding="utf-8"))
    thresholds = np.asarray(spec["thresholds"], np.float64)
    found = read_calibration(folder, spec["labels"])
    if found is None:
        return raw_oof, thresholds.tolist()
    return calibrated_oof, decision_thresholds(found[0], thresholds).tolist()


# ------------------------------------------------------------------------------------------- the table
def _pm(d: dict | None, key: str = "macro_f1") -> str:
    return f"{d[f'{key}_mean']:.4f}±{d[f'{key}_std']:.3f}" if d and f"{key}_mean" in d else "n/a"


class MultiLabelTask:
    """k-fold's multi-label task (finetune/tasks.py): a sigmoid per label, sets cut at per-label thresholds tuned
    nested; the blend and the calibration are per label; no out-of-domain detector yet."""

    pictures = "per_label_f1.png, label_cooccurrence.png"
    cools_final = False  # per-label calibrators: --calibration-share is not measured for them, the final model trains on every row

    def __init__(self, space):
        self.space = space
        self.issues = MultiLabelIssues(space.sep)

    def fold_scores(self, data, targets, train_idx, val_idx, proba, seed) -> tuple[np.ndarray, dict, dict]:
        return fold_scores(data, targets, train_idx, val_idx, proba, seed)

    def fold_line(self, k: int, saved: dict) -> str:
        return fold_line(k, saved)

    def rows_kind(self, data) -> str:
        return f"labels (multi-label, {int((data.Y.sum(1) == 0).sum())} rows with none)"

    def cv_report(self, cfg, got, data, recorded: dict, prep, device) -> tuple[dict, np.ndarray | None]:
        report, blend_oof = cv_report(cfg, got, data, recorded, prep, device)
        report["learned"] = assess_multi(data.Y, nested_thresholds(data.Y, got.oof, got.fold_of)[0],
                                         report["blend"], cfg.seed)
        return report, blend_oof

    def calibration(self, got, report: dict, blend_oof, data, target, delta) -> tuple[dict, np.ndarray, np.ndarray]:
        """The per-label calibration's nested numbers (finetune/calibration_multilabel.py), its coverage cut at
        each fold's nested decision thresholds."""
        served, fitted_on = served_oof(got.oof, report["blend"], blend_oof)
        section, _, after = calibrate_labels(served, data.Y, got.fold_of, data.labels, fitted_on, target,
                                             fold_decisions(report), delta)
        return section, served, after

    def out_of_domain(self, report: dict, data, fold_of: np.ndarray, calibrated: np.ndarray):
        """As the single-label task's, its cut costing at most MAX_DROP of all rows (a centroid per label)."""
        from finetune.confidence import fit_out_of_domain

        report["out_of_domain"], ood = fit_out_of_domain(data, fold_of, data.Y, None, report["warnings"])
        return ood

    def holdout_entry(self, out: Path, data, held, cfg, report: dict) -> dict:
        return holdout_entry(out, data, held, cfg, report)

    def score_final_holdout(self, report: dict, held, proba: np.ndarray, data) -> None:
        pass  # scored as served, in final_extras

    def final_extras(self, folder: Path, out: Path, data, held, proba, cfg, report: dict) -> dict | None:
        return final_extras(folder, out, data, held, proba, cfg, report)

    def pictures_of(self, out: Path, section: dict, before: np.ndarray, after: np.ndarray, data) -> None:
        pass  # the reliability diagram and coverage curve are top-label pictures

    def reference(self, folder: Path, served_oof: np.ndarray, calibrated_oof: np.ndarray):
        return served_reference(folder, served_oof, calibrated_oof)

    def extra_files(self, final: bool, held) -> str:
        return ", holdout_predictions.csv" if final and held is not None else ""

    def write_outputs(self, out: Path, cfg, data, oof, base_oof, blend_oof, fold_of, report, histories,
                      held=None) -> None:
        """oof_predictions.csv (every input row: fold, pred_labels joined by the separator at the nested thresholds,
        a probability column per label, the same for the baseline and the blend) and the plots."""
        from finetune.multilabel_plots import cooccurrence_png, per_label_f1_png

        table = data.table.copy()
        n_rows, labels, sep = len(table), data.labels, data.label_sep
        fold = np.full(n_rows, -1)
        fold[data.keep] = fold_of
        columns = {"fold": fold}  # joined at once: 3 x 40 labels inserted one by one fragment the frame (pandas warns)
        sections = [("", oof, report), ("baseline_", base_oof, report["baseline"]), ("blend_", blend_oof, report["blend"])]
        for prefix, probs, section in sections:
            if probs is None or not section or "folds" not in section or np.isnan(probs).any():
                continue
            pred = np.zeros(probs.shape, np.int64)
            for f in section["folds"]:
                held_rows = fold_of == f["fold"]
                thresholds = (f.get("tuned") or f)["thresholds"]
                pred[held_rows] = predict_sets(probs[held_rows], [thresholds[n] for n in labels])
            column = np.full(n_rows, "", dtype=object)
            column[data.keep] = _joined(pred, labels, sep)
            columns[f"{prefix}pred_labels"] = column
            columns.update(prob_columns(data, probs, prefix))
        columns["error"] = row_notes(data, held, "dropped: empty text")
        for name in [c for c in columns if c in table.columns]:  # an input column of that name stays where it is
            table[name] = columns.pop(name)
        write_table(pd.concat([table, pd.DataFrame(columns, index=table.index)], axis=1), out / "oof_predictions.csv")

        per_label_f1_png(report, out / "per_label_f1.png")
        cooccurrence_png(data.Y, labels, out / "label_cooccurrence.png")
        fold_pictures(out, report, histories, [f["tuned"]["macro_f1"] for f in report["folds"]])

    def summary_table(self, report: dict) -> str:
        """Per fold: micro- and macro-F1 at the nested thresholds and at 0.5, samples-F1, subset accuracy, the
        baseline's and the blend's nested macro-F1; then mean ± std per model."""
        base, blend = report["baseline"], report.get("blend") or {}
        head = (f"{'fold':>5} {'n_val':>6} {'micro-F1':>9} {'@0.5':>7} {'macro-F1':>9} {'@0.5':>7} {'samples-F1':>11} "
                f"{'subset-acc':>11} {'baseline':>9} {'blend':>7}")
        lines = ["", head, "-" * len(head)]
        blend_folds = blend.get("folds", [None] * len(report["folds"]))
        for r, b, bl in zip(report["folds"], base["folds"], blend_folds):
            t, p = r["tuned"], r["at_0_5"]
            lines.append(f"{r['fold']:>5} {r['n_val']:>6} {t['micro_f1']:>9.4f} {p['micro_f1']:>7.4f} {t['macro_f1']:>9.4f} "
                         f"{p['macro_f1']:>7.4f} {t['samples_f1']:>11.4f} {t['subset_accuracy']:>11.4f} "
                         f"{'n/a' if 'error' in b else format(b['macro_f1'], '.4f'):>9} "
                         f"{format(bl['macro_f1'], '.4f') if bl else '':>7}")
        lines.append("-" * len(head))
        lines.append("nested: each fold cut at thresholds tuned on the other folds; @0.5: every threshold 0.5")
        for name, d in (("model", report), ("baseline", base), ("blend", blend)):
            if d and "micro_f1_mean" in d:
                lines.append(f"{name:>8}: micro-F1 {_pm(d, 'micro_f1')} (0.5: {_pm(d['at_0_5'], 'micro_f1')}), "
                             f"macro-F1 {_pm(d)} (0.5: {_pm(d['at_0_5'])}), samples-F1 {_pm(d, 'samples_f1')}, "
                             f"subset accuracy {_pm(d, 'subset_accuracy')}")
        if blend:
            lines.append(f"blend {'kept' if blend['kept'] else 'not kept'}: {blend['why']}")
        held = report.get("holdout")
        if held:
            base_h = held.get("baseline", {})
            baseline = "n/a" if "error" in base_h else (f"micro-F1 {base_h['micro_f1']:.4f}, "
                                                         f"macro-F1 {base_h['macro_f1']:.4f}")
            final = (f"final {held['served']} micro-F1 {held['micro_f1']:.4f} (0.5: {held['at_0_5']['micro_f1']:.4f}), "
                     f"macro-F1 {held['macro_f1']:.4f} (0.5: {held['at_0_5']['macro_f1']:.4f}); " if "served" in held else "")
            lines.append(f"holdout ({held['n_rows']} rows, never trained on): {final}baseline {baseline}")
        lines += calibration_lines(report.get("calibration"))  # issue 42: multi-label says what it will serve
        lines += table_lines(report.get("label_issues"))
        return "\n".join(lines)
