"""Multi-label rows for k-fold (`--multi-label`): label sets read from a column, checked, and split into folds.

A label cell holds names separated by `--label-sep` (default ";") in CSV/TSV, or a list (JSON list in JSONL,
list column in Parquet, or its JSON text in a CSV cell), read by the label space's one parser
(textdata/labels.py, as serving and the app read it). An empty cell is a row with no label: "none of these" is
a real answer, kept and counted. Every check names the file, the row and the value: a cell mixing separators
(`a,b;c`), a label name the label-name rule refuses (the separator in it, a formula, a control character),
a label on fewer rows than folds (with the largest --folds that works).

Folds are stratified with iterative stratification (Sechidis et al. 2011, the `iterative-stratification`
package): each label's share is kept close in every fold, which stratifying on whole label combinations cannot
do when most combinations are rare (debtags: 417 combinations for 13,294 rows, 228 of them on fewer than 3 rows).
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from textdata.errors import DataError, capped
from textdata.labels import check_sep, parse_set


def _where(i: int) -> str:
    return f"data row {i + 1} (line {i + 2} of a CSV with a header)"


def parse_label_sets(cells: pd.Series, sep: str, path, column: str) -> list[list[str]]:
    """Each row's label names (sorted, without repeats), read by the label space's one parser (as serving and
    the app read them); DataError naming the file, the row, the column and the value of the first bad cell."""
    check_sep(sep, f"{path}: --label-sep")
    # the series' index is the row's position in the file as read (rows dropped before keep their number)
    sets = [sorted(parse_set(cell, sep, f"{path}: {_where(i)}, column {column!r}"))
            for i, cell in zip(cells.index.tolist(), cells.tolist())]
    if not any(len(s) > 1 for s in sets):
        print(f"warning: {path}: --multi-label, but no row of column {column!r} holds more than one label (no "
              f"{sep!r} in any cell); training anyway, one label or none per row", file=sys.stderr)
    return sets


def check_label_counts(Y: np.ndarray, labels: list[str], folds: int, path, after: str = "") -> None:
    """Every label on at least `folds` rows, so every fold can hold one; DataError naming the short ones."""
    counts = Y.sum(0)
    rare = [(labels[j], int(counts[j])) for j in np.flatnonzero(counts < folds)]
    if folds > 1 and rare:
        listing = capped(f"{n!r} ({c} rows)" for n, c in rare)
        largest = min(c for _, c in rare)
        fix = (f"lower --folds to {largest}" if largest >= 2 else
               "a label on a single row cannot be cross-validated: drop or merge it")
        raise DataError(f"{path}: {after}{folds}-fold cross-validation needs each label on at least {folds} rows; "
                        f"too few for {listing}. Add examples, merge or drop the label, or {fix}")


def combination_counts(Y: np.ndarray) -> dict:
    """How many rows carry no label, and how many distinct label sets there are (for the report)."""
    return {"rows_without_label": int((Y.sum(1) == 0).sum()), "label_combinations": len(np.unique(Y, axis=0)),
            "labels_per_row": round(float(Y.sum(1).mean()), 4) if len(Y) else 0.0}


# ------------------------------------------------------------------------------------------------ folds
def _stratifiable(Y: np.ndarray) -> np.ndarray:
    """iterstrat wants two or more indicator columns: one label is stratified as (label, not label)."""
    return np.column_stack([Y, 1 - Y]) if Y.shape[1] == 1 else Y


def _group_matrix(Y: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(one row per group: 1 where any of its rows carries the label, each row's group index)."""
    names, inverse = np.unique(groups, return_inverse=True)
    G = np.zeros((len(names), Y.shape[1]), dtype=np.int64)
    np.maximum.at(G, inverse, Y)
    return G, inverse


def multilabel_folds(Y: np.ndarray, groups: np.ndarray | None, folds: int, seed: int) -> list:
    """(train, val) pairs, iteratively stratified over the labels. With groups, the groups are what is split:
    each group stands for the labels any of its rows carries, and every row goes with its group.

    Why groups this way rather than StratifiedGroupKFold on a label-combination key: a combination key makes each
    rare combination a class of its own, so the per-label shares (what per-label F1 and thresholds are tuned on)
    go unbalanced; stratifying groups on their labels keeps those shares, at the cost of weighting a big group as
    one (groups are small in practice: a source document, a user)."""
    from iterstrat.ml_stratifiers import MultilabelStratifiedKFold

    splitter = MultilabelStratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    if groups is None:
        return [(tr, va) for tr, va in splitter.split(np.zeros(len(Y)), _stratifiable(Y))]
    G, inverse = _group_matrix(Y, groups)
    out = []
    for _, va_groups in splitter.split(np.zeros(len(G)), _stratifiable(G)):
        val = np.isin(inverse, va_groups)
        out.append((np.flatnonzero(~val), np.flatnonzero(val)))
    return out


def multilabel_split(Y: np.ndarray, groups: np.ndarray | None, fraction: float, seed: int) -> tuple:
    """One (train, held) split holding out about `fraction` of the rows (whole groups when grouped),
    iteratively stratified: the early-stopping rows of a fold, and --holdout."""
    from iterstrat.ml_stratifiers import MultilabelStratifiedShuffleSplit

    splitter = MultilabelStratifiedShuffleSplit(n_splits=1, test_size=fraction, random_state=seed)
    if groups is None:
        if len(Y) < 2:
            return np.arange(len(Y)), np.array([], dtype=np.int64)
        return next(splitter.split(np.zeros(len(Y)), _stratifiable(Y)))
    G, inverse = _group_matrix(Y, groups)
    if len(G) < 2:
        return np.arange(len(Y)), np.array([], dtype=np.int64)
    _, held_groups = next(splitter.split(np.zeros(len(G)), _stratifiable(G)))
    held = np.isin(inverse, held_groups)
    return np.flatnonzero(~held), np.flatnonzero(held)
