"""What a k-fold run reports: report.json's summary of the folds and the baseline, the held-out rows' entry,
oof_predictions.csv, the plots, and the table printed at the end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from baseline.blend import BaselineError, ServedBlend
from baseline.folds import baseline_predict
from finetune.blend import cv_blend, save_final_blend
from finetune.confidence import cv_calibration, fit_out_of_domain, out_of_domain_lines, write_pictures
from finetune.confidence import table_lines as calibration_lines
from finetune.config import Config
from finetune.label_issues import SingleLabelIssues, table_lines
from finetune.metrics import KEYS, fold_metrics, summarize
from finetune.outputs import fold_pictures, prob_columns, row_notes
from textdata.learned import assess
from textdata.tables import write_table


def fold_summary(cfg: Config, results: list[dict], recorded: dict, data, data_path, resolved: str, device) -> dict:
    """report.json's first part: per fold (without its baseline), mean ± std, the baseline beside it."""
    report = {
        "model": cfg.model, "resolved_model": resolved, "data": str(data_path), "labels": data.labels,
        "n_rows": len(data.table), "n_used": len(data.y), "dropped": data.dropped,
        "folds": [{k: v for k, v in r.items() if k != "baseline"} for r in results],
        **summarize(results),
        "baseline": {"name": "char TF-IDF + logistic regression", "folds": [r["baseline"] for r in results]},
        "config": recorded, "seed": cfg.seed, "device": str(device), "warnings": [],
    }
    fitted = [b for b in report["baseline"]["folds"] if "error" not in b]
    if fitted:
        report["baseline"].update(summarize(fitted))
        report["lift_macro_f1"] = report["macro_f1_mean"] - report["baseline"]["macro_f1_mean"]
    failed = [f"fold {r['fold']}: {r['baseline']['error']}" for r in results if "error" in r["baseline"]]
    if failed:
        report["warnings"].append(f"the TF-IDF baseline could not be fitted in {'; '.join(failed)}")
    return report


def f1_text(metrics: dict | None) -> str:
    return "n/a" if not metrics or "error" in metrics else f"{metrics['macro_f1']:.4f}"


def holdout_baseline(out: Path, data, held, cfg: Config) -> dict:
    """The held-out rows' entry in report.json; the baseline trained on every fold row is scored now, the
    final model (with --final) in final_model."""
    texts = data.texts + held.texts
    y = np.concatenate([data.y, held.y])
    cv, ho = np.arange(len(data.y)), np.arange(len(data.y), len(y))
    try:
        base = fold_metrics(held.y, baseline_predict(texts, y, cv, ho, cfg.seed).argmax(1), data.labels)
    except BaselineError as e:
        base = {"error": str(e)}
    return {"path": str(out / "holdout.csv"), "fraction": cfg.holdout, "n_rows": len(held.y),
            "scored": "final model" if cfg.final else "baseline only (no --final, so no final model to score)",
            "baseline": base}


class SingleLabelTask:
    """k-fold's single-label task (finetune/tasks.py): a softmax over classes, scored by argmax; the blend, the
    calibration, the coverage table and the out-of-domain detector are top-label ones."""

    pictures = "confusion_matrix.png, calibration.png, coverage.png"
    cools_final = True  # --calibration-share cools its one calibrator (finetune/sharpness.py)

    def __init__(self, space):
        self.space = space
        self.issues = SingleLabelIssues()

    def fold_scores(self, data, targets, train_idx, val_idx, proba, seed) -> tuple[np.ndarray, dict, dict]:
        """(the baseline's probabilities on the fold, the model's metrics, the baseline's) for a fold record."""
        try:
            base_proba = baseline_predict(data.texts, targets, train_idx, val_idx, seed)
            base_metrics = fold_metrics(data.y[val_idx], base_proba.argmax(1), data.labels)
        except BaselineError as e:  # the model's numbers stand; the report says why there is no baseline
            base_proba = np.full_like(proba, np.nan)
            base_metrics = {"error": str(e)}
        return base_proba, fold_metrics(data.y[val_idx], proba.argmax(1), data.labels), base_metrics

    def fold_line(self, k: int, saved: dict) -> str:
        return (f"fold {k}: macro-F1 {saved['macro_f1']:.4f} (baseline {f1_text(saved['baseline'])}), "
                f"accuracy {saved['accuracy']:.4f}, best epoch {saved['best_epoch']}")

    def rows_kind(self, data) -> str:
        return "classes"

    def cv_report(self, cfg: Config, got, data, recorded: dict, prep, device) -> tuple[dict, np.ndarray | None]:
        """report.json's folds, baseline, blend and finding (and the nested blended out-of-fold rows, or None)."""
        report = fold_summary(cfg, got.results, recorded, data, prep.data_path, prep.resolved, device)
        report["blend"], blend_oof = cv_blend(got.oof, got.base_oof, data.y, got.fold_of, data.labels, cfg.blend,
                                              report["macro_f1_mean"])
        report["learned"] = assess(data.y, got.oof, report["blend"], len(data.labels), cfg.seed)  # said plainly
        return report, blend_oof

    def calibration(self, got, report: dict, blend_oof, data, target, delta) -> tuple[dict, np.ndarray, np.ndarray]:
        return cv_calibration(got.oof, report["blend"], blend_oof, data, got.fold_of, target,
                              (report.get("config") or {}).get("group_column"), delta)

    def out_of_domain(self, report: dict, data, fold_of: np.ndarray, calibrated: np.ndarray):
        """report["out_of_domain"] and the detector --final carries in model/ood/ (baseline/ood.py): off-topic
        texts are never confident."""
        from textdata.calibration import confident, threshold_vector

        served = (report["calibration"] or {}).get("served") or {}
        sure = confident(calibrated, threshold_vector(served.get("threshold"), list(data.labels)))
        report["out_of_domain"], ood = fit_out_of_domain(data, fold_of, data.y, sure, report["warnings"])
        return ood

    def holdout_entry(self, out: Path, data, held, cfg: Config, report: dict) -> dict:
        return holdout_baseline(out, data, held, cfg)

    def score_final_holdout(self, report: dict, held, proba: np.ndarray, data) -> None:
        """The final model on the held-out rows, which it never saw."""
        report["holdout"].update(fold_metrics(held.y, proba.argmax(1), data.labels))
        print(f"holdout ({len(held.y)} rows never trained on): final model macro-F1 "
              f"{report['holdout']['macro_f1']:.4f}, baseline {f1_text(report['holdout']['baseline'])}",
              file=sys.stderr)

    def final_extras(self, folder: Path, out: Path, data, held, proba, cfg: Config, report: dict) -> dict | None:
        """baseline/ with a kept blend, and the blend as served (read back) on the held-out rows; the blend's
        entry for training_config.json, or None."""
        blend = save_final_blend(folder, data.texts, data.y, len(data.labels), cfg.seed, report["blend"],
                                 report["warnings"])
        if blend and held is not None:  # the blend as served (baseline/ read back), on rows nothing was fitted on
            served = ServedBlend(folder, len(data.labels))(proba, held.texts)
            report["holdout"]["blend"] = fold_metrics(held.y, served.argmax(1), data.labels)
        return blend

    def pictures_of(self, out: Path, section: dict, before: np.ndarray, after: np.ndarray, data) -> None:
        write_pictures(out, section, before, after, data)

    def reference(self, folder: Path, served_oof: np.ndarray, calibrated_oof: np.ndarray):
        """(out-of-fold probabilities, thresholds) on the served scale, for the drift reference."""
        return calibrated_oof, None

    def extra_files(self, final: bool, held) -> str:
        return ""

    def write_outputs(self, out, cfg, data, oof, base_oof, blend_oof, fold_of, report, histories,
                      held=None) -> None:
        """oof_predictions.csv (every input row: fold, pred_label, pred_score, the probabilities of the model, the
        baseline and the blend) and the plots."""
        from finetune.plots import confusion_png

        table = data.table.copy()
        n_rows = len(table)
        pred = np.full(n_rows, "", dtype=object)
        base_pred = np.full(n_rows, "", dtype=object)
        score = np.full(n_rows, np.nan)
        fold = np.full(n_rows, -1)
        labels = np.array(data.labels, dtype=object)
        pred[data.keep], score[data.keep] = labels[oof.argmax(1)], oof.max(1)
        base_pred[data.keep] = np.where(np.isnan(base_oof).any(1), "", labels[np.nan_to_num(base_oof).argmax(1)])
        fold[data.keep] = fold_of
        table["fold"], table["pred_label"], table["pred_score"] = fold, pred, score
        for prefix, probs in (("", oof), ("baseline_", base_oof), ("blend_", blend_oof)):
            if probs is None:
                continue
            if prefix == "blend_":  # nested: each row blended with parameters fitted on the other folds
                blend_pred = np.full(n_rows, "", dtype=object)
                blend_pred[data.keep] = labels[probs.argmax(1)]
                table["blend_pred_label"] = blend_pred
            for name, col in prob_columns(data, probs, prefix).items():
                table[name] = col
        table["baseline_pred_label"] = base_pred
        table["error"] = row_notes(data, held, "dropped: empty text or label")
        write_table(table, out / "oof_predictions.csv")

        total = np.sum([r["confusion_matrix"] for r in report["folds"]], axis=0)
        confusion_png(total, data.labels, out / "confusion_matrix.png",
                      f"out-of-fold confusion, macro-F1 {report['macro_f1_mean']:.3f}")
        fold_pictures(out, report, histories, [r["macro_f1"] for r in report["folds"]])

    def summary_table(self, report: dict) -> str:
        """Per fold and mean ± std; baseline and blend columns are macro-F1 (the blend's nested)."""
        base, blend = report["baseline"], report.get("blend") or {}
        blend_folds = blend.get("folds", [None] * len(report["folds"]))
        head = (f"{'fold':>6} {'n_val':>6} {'accuracy':>9} {'macro-F1':>9} {'weighted-F1':>12} {'baseline':>14}"
                + (f" {'blend':>14}" if "folds" in blend else ""))
        lines = ["", head, "-" * len(head)]
        for r, b, bl in zip(report["folds"], base["folds"], blend_folds):
            lines.append(f"{r['fold']:>6} {r['n_val']:>6} {r['accuracy']:>9.4f} {r['macro_f1']:>9.4f} "
                         f"{r['weighted_f1']:>12.4f} {f1_text(b):>14}" + (f" {f1_text(bl):>14}" if bl else ""))
        lines.append("-" * len(head))
        m = {k: f"{report[f'{k}_mean']:.4f}±{report[f'{k}_std']:.3f}" for k in KEYS}
        pm = lambda d: f"{d['macro_f1_mean']:.4f}±{d['macro_f1_std']:.3f}" if "macro_f1_mean" in d else "n/a"
        lines.append(f"{'mean':>6} {'':>6} {m['accuracy']:>9} {m['macro_f1']:>9} {m['weighted_f1']:>12} {pm(base):>14}"
                     + (f" {pm(blend):>14}" if "folds" in blend else ""))
        lines.append(f"\nmacro-F1 {report['macro_f1_mean']:.4f} ± {report['macro_f1_std']:.4f} vs baseline {pm(base)}"
                     + (f" (lift {report['lift_macro_f1']:+.4f})" if "lift_macro_f1" in report else ""))
        if blend:
            score = f"{pm(blend)} (nested), weights model {blend['model_weight']:g}, baseline {blend['baseline_weight']:g}; " \
                if "folds" in blend else ""
            lines.append(f"blend {score}{'kept' if blend['kept'] else 'not kept'}: {blend['why']}")
        learned = (report.get("learned") or {}).get("message")
        if learned:
            lines.append(f"warning: {learned}")
        lines += calibration_lines(report.get("calibration"))
        lines += out_of_domain_lines(report.get("out_of_domain"))
        held = report.get("holdout")
        if held:
            final = f"final model {held['macro_f1']:.4f}, " if "macro_f1" in held else ""
            lines.append(f"holdout ({held['n_rows']} rows, never trained on): {final}"
                         f"baseline {f1_text(held['baseline'])}" + (f", blend {f1_text(held['blend'])}" if "blend" in held else ""))
        lines += table_lines(report.get("label_issues"))
        return "\n".join(lines)
