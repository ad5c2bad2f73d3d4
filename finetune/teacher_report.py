"""A --teacher-column run's report, every score on gold rows only: the gold-row view k-fold reports on, the teacher
judged against the student on the same rows, and the teacher labels the student doubts (confident learning).

Fold scores, the blend, the calibration and the served threshold are all fitted and measured on the gold rows
(`gold_only`): teacher rows train the folds but are never scored as if they were right. report.json's
"teacher" section (`teacher_section`): rows of each kind, the teacher's macro-F1 on the gold rows it answered,
the student's nested out-of-fold macro-F1 on those same rows, their agreement, the confusions where they
disagree, the cost table, and OUTPUT/teacher_label_issues.csv.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from finetune.data import rows_at
from finetune.metrics import fold_metrics
from finetune.multilabel import DEFAULT, multilabel_metrics, nested_thresholds, predict_sets
from finetune.teacher_data import TeacherData, gold_repeats, has_answer, macro_f1
from textdata.tables import write_table

ISSUES_FILE = "teacher_label_issues.csv"
COST_COLUMN = "teacher_cost"  # per row, as finetune.teach writes it


def gold_only(data: TeacherData, got):
    """(the gold rows as LabeledData, the fold results on them): per-fold scores recomputed on gold rows (as the
    kind's fold records score them: argmax, or each label at 0.5)."""
    g = np.flatnonzero(data.gold)
    view = rows_at(data, g)  # cuts a TeacherData's gold / answered arrays too
    scores = data.space.pick(lambda y, p, labels: fold_metrics(y, p.argmax(1), labels),
                             lambda Y, p, labels: {"threshold": DEFAULT,
                                                   **multilabel_metrics(Y, predict_sets(p, DEFAULT), labels)})
    results = []
    for k, r in enumerate(got.results):
        rows = g[got.fold_of[g] == k]
        base = got.base_oof[rows]
        r = {**r, **scores(data.targets[rows], got.oof[rows], data.labels), "n_val": len(rows),
             "n_val_teacher_rows": int(((got.fold_of == k) & ~data.gold).sum())}
        if "error" not in r["baseline"] and not np.isnan(base).any():
            r["baseline"] = scores(data.targets[rows], base, data.labels)
        results.append(r)
    return view, dataclasses.replace(got, results=results, oof=got.oof[g], base_oof=got.base_oof[g],
                                     fold_of=got.fold_of[g])


def run(out: Path, cfg, full: TeacherData, got, blend_oof, blend: dict | None) -> dict:
    """k-fold's hook, after the gold-row outputs are written: report.json's "teacher" section, the teacher label
    issues, and oof_predictions.csv saying which rows were teacher rows (trained on, never scored)."""
    from finetune.label_issues import served_probabilities

    served, name = served_probabilities(got.oof[full.gold], blend_oof, blend)
    cpu = [r.get("predict_cpu_seconds") for r in got.results]
    per_1000 = None if None in cpu else round(sum(cpu) / len(full.texts) * 1000, 3)
    repeats = gold_repeats(int(full.gold.sum()), int((~full.gold).sum()), cfg.gold_weight)
    section = teacher_section(out, full, got.oof, got.fold_of, served, name, per_1000, repeats)
    mark_teacher_rows(out / "oof_predictions.csv", full)
    return section


def mark_teacher_rows(path: Path, full: TeacherData) -> None:
    if not path.exists():
        return
    from textdata.tables import read_table

    table = read_table(path)
    error = table["error"].astype(str).where(table["error"].notna(), "").to_numpy(dtype=object)
    error[full.keep[~full.gold]] = "teacher row: trained on, not scored (finetune/teacher_report.py)"
    table["error"] = error
    write_table(table, path)


def teacher_section(out: Path, full: TeacherData, full_oof: np.ndarray, fold_of: np.ndarray, served_gold: np.ndarray,
                    served_name: str, cpu_per_1000: float | None, gold_weight_repeats: int) -> dict:
    """report.json's "teacher": the teacher against the student on the gold rows the teacher answered."""
    labels, space = full.labels, full.space
    y_gold, said = full.targets[full.gold], full.answered[full.gold]
    judged = has_answer(said)
    # the student's answers as served, nested: argmax, or each label over its threshold tuned on the other folds
    student = space.pick(lambda: served_gold.argmax(1),
                         lambda: nested_thresholds(y_gold, served_gold, fold_of[full.gold])[0])()
    section = {
        "rows": {"gold": int(full.gold.sum()), "teacher_only": int((~full.gold).sum()),
                 "gold_with_teacher_answer": int(judged.sum()),
                 "teacher_outside_label_set": full.outside or {}},
        "gold_repeats": gold_weight_repeats, "student": served_name,
        "relabelled_teacher_rows": int((~same(full.answered, full.targets) & ~full.gold).sum()),
        # p(class | text)'s exponent chosen on the gold rows: the final model's labels first, then each fold's
        "text_weights": list(full.text_weights),
    }
    if judged.any():
        yt, st, tt = y_gold[judged], student[judged], said[judged]
        named = space.pick(lambda v: labels[v], lambda v: space.marked(labels[j] for j in np.flatnonzero(v)))
        disagree = Counter((named(a), named(b), named(c)) for a, b, c, d in zip(tt, st, yt, same(tt, st)) if not d)
        (teacher_f1, per_class), (student_f1, _) = answer_scores(space, yt, tt), answer_scores(space, yt, st)
        section.update({
            "n_judged": int(judged.sum()),
            "teacher_macro_f1": round(teacher_f1, 4),
            "student_macro_f1": round(student_f1, 4),
            # a set is right only when whole (subset accuracy)
            "teacher_accuracy": round(float(same(tt, yt).mean()), 4),
            "student_accuracy": round(float(same(st, yt).mean()), 4),
            "agreement": round(float(same(tt, st).mean()), 4),
            "teacher_per_class": per_class,
            "disagreements": [{"teacher": a, "student": b, "gold": c, "rows": k}
                              for (a, b, c), k in disagree.most_common(20)],
        })
    else:
        section["note"] = ("no gold row has a teacher answer: the teacher cannot be judged; give the teacher's "
                           "answers for the gold rows too")
    section["cost"] = cost_table(full, cpu_per_1000)
    section["label_issues"] = teacher_issues(out, full, full_oof, fold_of)
    return section


def answer_scores(space, truth: np.ndarray, pred: np.ndarray) -> tuple[float, dict]:
    """(macro-F1, the per-class or per-label figures) of answers against the truth."""
    return space.pick(lambda: (macro_f1(truth, pred, len(space.labels)),
                               fold_metrics(truth, pred, list(space.labels))["per_class"]),
                      lambda: _multi_scores(multilabel_metrics(truth, pred, list(space.labels))))()


def _multi_scores(m: dict) -> tuple[float, dict]:
    return m["macro_f1"], m["per_label"]


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n,) bool: row i of `a` equals row i of `b` (a class id, or a whole label set)."""
    return (np.asarray(a) == np.asarray(b)).reshape(len(a), -1).all(1)


def cost_table(full: TeacherData, cpu_per_1000: float | None) -> dict:
    table = full.table
    teacher = None
    if COST_COLUMN in table.columns:
        paid = table[COST_COLUMN].astype(float)
        teacher = round(float(paid.sum()) / max(1, int(paid.notna().sum())) * 1000, 6)
    return {"teacher_per_1000_texts": teacher,
            "teacher_source": f"column {COST_COLUMN!r} (finetune.teach: tokens x price)" if teacher is not None
            else f"no {COST_COLUMN!r} column: label with finetune.teach --price-per-1k-input/--price-per-1k-output",
            "student_cpu_seconds_per_1000_texts": cpu_per_1000,
            "student_source": "process CPU time of the folds' predictions on their held-out rows"}


def teacher_issues(out: Path, full: TeacherData, oof: np.ndarray, fold_of: np.ndarray) -> dict:
    """The teacher's answers (on teacher rows, in the label set) that the student's out-of-fold probabilities doubt
    most, by cleanlab; OUTPUT/teacher_label_issues.csv, most likely error first."""
    import warnings

    (out / ISSUES_FILE).unlink(missing_ok=True)
    rows = np.flatnonzero(~full.gold & has_answer(full.answered) & np.isfinite(oof).all(1))
    find = full.space.pick(_single_issues, _multi_issues)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            found = find(full, oof, fold_of, rows)
        except (ValueError, AssertionError) as e:
            return {"skipped": f"cleanlab refused: {str(e)[:200]}"}
    if isinstance(found, str):
        return {"skipped": found}
    table = [{"rank": r + 1, "row": int(full.keep[rows[i]]), "text": full.texts[rows[i]], **cells,
              "fold": int(fold_of[rows[i]])} for r, (i, cells) in enumerate(found)]
    import pandas as pd

    write_table(pd.DataFrame(table, columns=["rank", "row", "text", "teacher_label", "student_label",
                                             "p_teacher_label", "fold"]), out / ISSUES_FILE)
    print(f"teacher label issues: {len(table)} of {len(rows)} teacher rows flagged, in {out / ISSUES_FILE}",
          file=sys.stderr)
    return {"n_rows": len(rows), "n_flagged": len(table), "file": ISSUES_FILE}


def _single_issues(full: TeacherData, oof: np.ndarray, fold_of: np.ndarray, rows: np.ndarray):
    """[(position in `rows`, the row's cells)], most likely error first; a str saying why none were looked for."""
    from finetune.label_issues import MIN_ROWS_PER_CLASS, find_single

    counts = np.bincount(full.answered[rows], minlength=len(full.labels))
    if len(rows) == 0 or (counts[counts > 0] < MIN_ROWS_PER_CLASS).any():
        return "too few teacher rows per answered class"
    present = np.flatnonzero(counts)  # a class the teacher never answers: cleanlab needs every given class seen
    remap = {c: i for i, c in enumerate(present)}
    probs = oof[rows][:, present]
    probs = probs / probs.sum(1, keepdims=True).clip(min=1e-12)
    found = find_single(np.array([remap[c] for c in full.answered[rows]]), probs, [full.labels[c] for c in present])
    names, student = np.array(full.labels, dtype=object), oof[rows].argmax(1)
    return [(i, {"teacher_label": names[full.answered[rows[i]]], "student_label": names[student[i]],
                 "p_teacher_label": round(float(oof[rows[i], full.answered[rows[i]]]), 6)}) for i in found.ranked]


def _multi_issues(full: TeacherData, oof: np.ndarray, fold_of: np.ndarray, rows: np.ndarray):
    """`_single_issues` for label sets: the student's suggestion is its nested-threshold set, the probability the
    one of the teacher's whole set (finetune/label_issues.py `find_multi`)."""
    from finetune.label_issues import find_multi

    if len(rows) == 0:
        return "no teacher rows with an answer in the label set"
    found = find_multi(full.answered[rows], oof[rows], full.labels, fold_of[rows])
    named = lambda v: full.space.marked(full.labels[j] for j in np.flatnonzero(v))
    return [(i, {"teacher_label": named(full.answered[rows[i]]), "student_label": named(found.suggested[i]),
                 "p_teacher_label": float(f"{found.p_given[i]:.6g}")}) for i in found.ranked]


def table_lines(section: dict | None) -> list[str]:
    """The lines k-fold's summary prints."""
    if not section:
        return []
    if "teacher_macro_f1" not in section:
        return [f"teacher: {section.get('note', '')}"]
    cost = section["cost"]
    return [(f"on {section['n_judged']} gold rows: teacher macro-F1 {section['teacher_macro_f1']:.4f}, student "
            f"(nested out-of-fold, {section['student']}) {section['student_macro_f1']:.4f}, agreement "
            f"{section['agreement']:.1%}; {section['relabelled_teacher_rows']} teacher labels corrected; cost per "
            f"1,000 texts: teacher {cost['teacher_per_1000_texts']}, student "
            f"{cost['student_cpu_seconds_per_1000_texts']} CPU-seconds")]
