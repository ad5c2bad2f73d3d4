"""What a k-fold run reports: report.json's summary of the folds and the baseline, the held-out rows' entry,
oof_predictions.csv, the plots, and the table printed at the end."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from baseline.blend import BaselineError
from baseline.folds import baseline_predict
from finetune.confidence import out_of_domain_lines
from finetune.confidence import table_lines as calibration_lines
from finetune.config import Config
from finetune.label_issues import table_lines
from finetune.metrics import KEYS, fold_metrics, summarize
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


def write_outputs(out, cfg, data, oof, base_oof, blend_oof, fold_of, report, histories, held=None) -> None:
    from finetune.plots import confusion_png, fold_scores_png, learning_curves_png

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
        for j, name in enumerate(data.labels):
            col = np.full(n_rows, np.nan)
            col[data.keep] = probs[:, j]
            table[f"{prefix}prob_{name}"] = col
    table["baseline_pred_label"] = base_pred
    error = np.full(n_rows, "", dtype=object)
    error[np.setdiff1d(np.arange(n_rows), data.keep)] = "dropped: empty text or label"
    if held is not None:
        error[held.keep] = "held out (--holdout): in holdout.csv"
    table["error"] = error
    write_table(table, out / "oof_predictions.csv")

    total = np.sum([r["confusion_matrix"] for r in report["folds"]], axis=0)
    confusion_png(total, data.labels, out / "confusion_matrix.png",
                  f"out-of-fold confusion, macro-F1 {report['macro_f1_mean']:.3f}")
    learning_curves_png(histories, out / "learning_curves.png")
    blend = report["blend"] or {}
    fold_scores_png([r["macro_f1"] for r in report["folds"]],
                    [b.get("macro_f1", np.nan) for b in report["baseline"]["folds"]], out / "fold_scores.png",
                    [b["macro_f1"] for b in blend["folds"]] if "folds" in blend else None)



def summary_table(report: dict) -> str:
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

