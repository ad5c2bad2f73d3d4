"""Likely label errors, ranked from the out-of-fold probabilities of what is served (confident learning).

k-fold gives every row a probability from a model that never trained on it: exactly what confident learning
(Northcutt et al.) needs. cleanlab does the method; this module picks the probabilities (the blend's nested
out-of-fold ones where the blend is kept, else the model's), writes OUTPUT/label_issues.csv (most likely
error first), OUTPUT/label_issues.png (the confident joint and the suspects per class) and report.json's
"label_issues" (count and estimated noise rate per class). `--label-issues off` skips it.

Flagged: cleanlab.filter.find_label_issues (prune_by_noise_rate: per off-diagonal cell of the confident
joint, its estimated count of rows, those whose suggestion beats the given label by the widest margin).
Ranked: cleanlab.rank.get_label_quality_scores (self-confidence: the given label's probability; low first).
Estimated noise rate of a class: the share of the rows given that label whose true label is another, from
cleanlab.count.estimate_joint. Multi-label data (`data.Y`) goes through cleanlab's multi-label API (one-vs-rest
per label); its file's `given_label` and `suggested_label` are label sets (names joined by the data's separator,
empty for none) and a last column `label_sep` names that separator. The kind is the caller's `finder(space)`.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from finetune.multilabel import nested_thresholds
from textdata.errors import capped
from textdata.labels import DEFAULT_SEP
from textdata.model_files import LABEL_ISSUES as FILE
from textdata.tables import write_table

MODES = ("auto", "off")
PLOT = "label_issues.png"
# Confident learning estimates a per-class threshold (the mean probability of a class on the rows given it)
# and a per-class noise count: with fewer rows than this both are noise themselves.
MIN_ROWS_PER_CLASS = 5
COLUMNS = ["rank", "row", "text", "given_label", "suggested_label", "p_given", "p_suggested", "quality", "fold"]
LABEL_SEP = DEFAULT_SEP  # multi-label sets in one cell, as thresholds.json's label_sep (the label space's default)


@dataclass
class Issues:
    """Cleanlab's verdict on n rows: which are flagged, in what order, what to suggest instead."""

    ranked: np.ndarray  # positions of the flagged rows, most likely error first
    quality: np.ndarray  # (n,) label quality score, 0..1, low = likely wrong
    suggested: list  # (n,) the suggestion per row: a class id, or a 0/1 vector (multi-label)
    p_given: np.ndarray  # (n,) probability of the given label (multi-label: of the given set)
    p_suggested: np.ndarray  # (n,) probability of the suggestion
    per_class: dict  # label -> {"rows", "flagged", "estimated_noise_rate"}
    joint: np.ndarray  # the confident joint: (K, K) given x suggested, or (L, 2, 2) one-vs-rest


def too_few_rows(counts: np.ndarray, labels: list[str]) -> str | None:
    """Why the method cannot run on these class counts (each class named), or None."""
    small = [(name, int(c)) for name, c in zip(labels, counts) if c < MIN_ROWS_PER_CLASS]
    if not small:
        return None
    listed = capped(f"{name!r} ({c} rows)" for name, c in small)
    return (f"label issues skipped: confident learning needs at least {MIN_ROWS_PER_CLASS} rows per class; "
            f"too few for {listed}")


def find_single(y: np.ndarray, probs: np.ndarray, labels: list[str]) -> Issues:
    """Single-label rows: y (n,) class ids, probs (n, K) rows summing to 1."""
    from cleanlab.count import compute_confident_joint, estimate_joint
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores

    y = np.asarray(y, dtype=np.int64)
    probs = _renormalised(probs)
    # n_jobs=1: cleanlab's process pool costs more than it saves at these sizes, and forks inside Ray workers
    flagged = find_label_issues(y, probs, filter_by="prune_by_noise_rate", n_jobs=1)
    quality = get_label_quality_scores(y, probs, method="self_confidence")
    rows = np.arange(len(y))
    others = probs.copy()
    others[rows, y] = -np.inf  # the suggestion is the likeliest label other than the given one
    suggested = others.argmax(1)
    joint_counts = compute_confident_joint(y, probs)
    joint = estimate_joint(y, probs, confident_joint=joint_counts)
    counts = np.bincount(y, minlength=len(labels))
    per_class = {}
    for k, name in enumerate(labels):
        given_k = joint[k].sum()
        per_class[name] = {"rows": int(counts[k]), "flagged": int(flagged[y == k].sum()),
                           "estimated_noise_rate": round(float(1 - joint[k, k] / given_k) if given_k else 0.0, 4)}
    return Issues(_ranked(flagged, quality), quality, suggested.tolist(), probs[rows, y], probs[rows, suggested],
                  per_class, joint_counts)


def find_multi(Y: np.ndarray, probs: np.ndarray, labels: list[str], fold_of: np.ndarray | None = None) -> Issues:
    """Multi-label rows: Y (n, L) 0/1, probs (n, L) independent sigmoids. A row is flagged when any of its
    labels looks wrong (cleanlab's multi-label API). The suggestion is the set the served model would answer:
    with `fold_of`, each label over its threshold tuned on the other folds' rows (nested, as k-fold scores
    and serving answers, `p > t`); without, the set over 0.5."""
    from cleanlab.count import compute_confident_joint
    from cleanlab.multilabel_classification.filter import find_label_issues
    from cleanlab.multilabel_classification.rank import get_label_quality_scores

    Y = np.asarray(Y, dtype=np.int64)
    probs = np.clip(np.asarray(probs, dtype=np.float64), 1e-6, 1 - 1e-6)
    as_lists = [list(np.flatnonzero(r)) for r in Y]
    flagged = find_label_issues(as_lists, probs, filter_by="prune_by_noise_rate", n_jobs=1)
    quality = get_label_quality_scores(as_lists, probs)
    if fold_of is None:
        suggested = (probs >= 0.5).astype(np.int64)
    else:  # tuned thresholds, not 0.5: a label the model scores low (rare, uncalibrated) is still suggested
        suggested = nested_thresholds(Y, probs, np.asarray(fold_of))[0]
    # the probability of a whole set under independent labels (the most probable set is the one over 0.5)
    p_set = lambda S: np.exp(np.sum(S * np.log(probs) + (1 - S) * np.log1p(-probs), axis=1))
    joint = compute_confident_joint(as_lists, probs, multi_label=True)  # (L, 2, 2): label l, given, true
    per_class = {}
    for j, name in enumerate(labels):
        cell = joint[j]
        per_class[name] = {"rows": int(Y[:, j].sum()), "flagged": int((flagged & (Y[:, j] != suggested[:, j])).sum()),
                           "estimated_noise_rate": round(float((cell[0, 1] + cell[1, 0]) / max(cell.sum(), 1)), 4)}
    return Issues(_ranked(flagged, quality), quality, [r for r in suggested], p_set(Y), p_set(suggested), per_class,
                  joint)


def _renormalised(probs) -> np.ndarray:
    """float64 rows summing to 1 exactly: cleanlab checks it, and float32 softmax rows miss by 1e-7."""
    p = np.clip(np.asarray(probs, dtype=np.float64), 0, None)
    return p / p.sum(1, keepdims=True)


def _ranked(flagged: np.ndarray, quality: np.ndarray) -> np.ndarray:
    idx = np.flatnonzero(flagged)
    return idx[np.argsort(quality[idx], kind="stable")]


def served_probabilities(oof: np.ndarray, blend_oof: np.ndarray | None, blend: dict | None) -> tuple[np.ndarray, str]:
    """What the final model serves, measured out of fold: the nested blend where it is kept, else the model."""
    if blend and blend.get("kept") and blend_oof is not None:
        return blend_oof, "blend (nested out-of-fold)"
    return oof, "model (out-of-fold)"


def _digits(x) -> float:
    """Six significant digits: a multi-label set's probability is a product (1e-9 is common), which six
    decimals wrote as 0.0."""
    return float(f"{float(x):.6g}")


class SingleLabelIssues:
    """One label per row: class ids given, a class id suggested, the file's cells are label names."""

    multi_label = False
    joint = "class_joint"  # how finetune/plots.py draws its confident joint (JOINTS)

    def counts(self, data) -> np.ndarray:
        return np.bincount(data.y, minlength=len(data.labels))

    def find(self, data, probs: np.ndarray, fold_of: np.ndarray) -> Issues:
        return find_single(data.y, probs, data.labels)

    def given(self, data) -> np.ndarray:
        return data.y

    def name(self, names: np.ndarray, v) -> str:
        return names[int(v)]

    def finish(self, table: pd.DataFrame) -> pd.DataFrame:
        return table


@dataclass(frozen=True)
class MultiLabelIssues:
    """A set per row: 0/1 vectors given and suggested, the file's cells are sets joined by `sep`, and a last
    column names it (the review UI needs both: app/labeling/review.py)."""

    sep: str = LABEL_SEP  # the data's own separator (issue 32's --label-sep)
    multi_label = True
    joint = "label_joint"

    def counts(self, data) -> np.ndarray:
        return np.asarray(data.Y).sum(0)

    def find(self, data, probs: np.ndarray, fold_of: np.ndarray) -> Issues:
        return find_multi(data.Y, probs, data.labels, fold_of)

    def given(self, data) -> np.ndarray:
        return data.Y

    def name(self, names: np.ndarray, v) -> str:
        return self.sep.join(names[np.flatnonzero(v)])

    def finish(self, table: pd.DataFrame) -> pd.DataFrame:
        table["label_sep"] = self.sep
        return table


def finder(space) -> SingleLabelIssues | MultiLabelIssues:
    """The finder for a label space (textdata/labels.py), picked once."""
    return space.pick(SingleLabelIssues(), MultiLabelIssues(space.sep or LABEL_SEP))


def issues_table(issues: Issues, data, fold_of: np.ndarray, data_name: str, kind) -> pd.DataFrame:
    """label_issues.csv: the flagged rows, most likely error first. `row` is the row's position in the data
    file (0 = the first row under the header), as in fold_ids.json. `kind`: `finder(space)`."""
    names = np.array(data.labels, dtype=object)
    given = kind.given(data)
    rows = [{"rank": r + 1, "row": int(data.keep[i]), "text": data.texts[i],
             "given_label": kind.name(names, given[i]), "suggested_label": kind.name(names, issues.suggested[i]),
             "p_given": _digits(issues.p_given[i]), "p_suggested": _digits(issues.p_suggested[i]),
             "quality": _digits(issues.quality[i]), "fold": int(fold_of[i])} for r, i in enumerate(issues.ranked)]
    table = pd.DataFrame(rows, columns=COLUMNS)
    if data.groups is not None:
        table["group"] = [data.groups[i] for i in issues.ranked]
    table["data"] = data_name  # the review UI refuses a file made from other data (app/labeling/review.py)
    return kind.finish(table)


def run(mode: str, out: Path, data, oof: np.ndarray, blend_oof, blend: dict | None, fold_of: np.ndarray,
        data_path, warnings_out: list[str], kind) -> dict | None:
    """The k-fold hook: report.json's "label_issues" (None with --label-issues off), and its files in `out`.
    `kind`: `finder(space)` of the data's label space. Too few rows of a class: a warning naming them, no
    files, the run goes on."""
    (out / FILE).unlink(missing_ok=True)  # a rerun into the same folder (--resume) must not leave an old list
    (out / PLOT).unlink(missing_ok=True)
    if mode == "off":
        return None
    started = time.perf_counter()
    why = too_few_rows(kind.counts(data), data.labels)
    if why:
        warnings_out.append(why)
        return {"skipped": why}
    probs, source = served_probabilities(oof, blend_oof, blend)
    missing = int((~np.isfinite(np.asarray(probs, dtype=np.float64))).any(1).sum())
    if missing:  # cleanlab does not check: a NaN row would skew every class's threshold silently
        why = f"label issues skipped: {missing} rows have no out-of-fold probability ({source})"
        warnings_out.append(why)
        return {"skipped": why}
    try:
        with warnings.catch_warnings():  # cleanlab warns about its own deprecations and tiny classes
            warnings.simplefilter("ignore")
            issues = kind.find(data, probs, fold_of)
    except (ValueError, AssertionError) as e:  # cleanlab checks its inputs with asserts: the folds' work stands
        why = f"label issues skipped: cleanlab refused these probabilities ({type(e).__name__}: {str(e)[:200]})"
        warnings_out.append(why)
        return {"skipped": why}
    table = issues_table(issues, data, fold_of, Path(str(data_path)).name, kind)
    write_table(table, out / FILE)
    from finetune.plots import JOINTS, label_issues_png

    label_issues_png(issues.joint, issues.per_class, data.labels, out / PLOT, JOINTS[kind.joint])
    n = len(data.texts)
    section = {
        "method": "cleanlab confident learning (find_label_issues, prune_by_noise_rate; ranked by self-confidence)",
        "probabilities": source, "multi_label": kind.multi_label, "n_rows": n, "n_flagged": len(issues.ranked),
        "flagged_share": round(len(issues.ranked) / n, 4) if n else 0.0, "per_class": issues.per_class,
        "file": FILE, "plot": PLOT, "seconds": round(time.perf_counter() - started, 3),
    }
    print(f"label issues: {section['n_flagged']} of {n} rows flagged ({source}) in {section['seconds']:.2f} s; "
          f"most likely first in {out / FILE}", file=sys.stderr)
    return section


def table_lines(section: dict | None) -> list[str]:
    """The lines k-fold's summary table prints for this step."""
    if not section:
        return []
    if "skipped" in section:
        return [section["skipped"]]
    per = ", ".join(f"{k} {v['flagged']} ({v['estimated_noise_rate']:.1%})" for k, v in section["per_class"].items())
    return [(f"label issues ({section['probabilities']}): {section['n_flagged']} of {section['n_rows']} rows flagged "
             f"({section['flagged_share']:.1%}) in {section['file']}; flagged (estimated noise rate) per class: {per}")]


def carry(out: Path, folder: Path) -> None:
    """--final: the model folder carries the run's list, so each app version has the suspects of its own data."""
    import shutil

    (folder / FILE).unlink(missing_ok=True)
    if (out / FILE).exists():
        shutil.copy2(out / FILE, folder / FILE)
