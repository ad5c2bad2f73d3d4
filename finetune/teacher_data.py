"""Learning from an LLM's labels and a few gold ones (finetune/kfold.py --teacher-column): the rules, in one place.

A row with a gold label is gold; a row with only the teacher's answer is teacher-labelled. Three rules:
- the teacher is judged on gold rows only: its confusion T[true, answered] is counted on the gold rows the
  model is allowed to see (a fold's training rows, nested), smoothed towards uniform;
- a teacher label is corrected where the gold rows say it is unreliable: the row's label becomes the argmax of
  p(true | text) * T[true, answered] * (the teacher rows' class mix, by EM), p from a model fitted on the gold rows
  alone (a teacher that never answers a class answers its neighbour instead: T's column for that neighbour then
  holds both classes, and the text decides between them). Where T's column is clean the teacher's answer stands;
- gold rows weigh more: repeated `gold_repeats` times in training (the measured choice: bench/teacher.py).
Every score of a teacher run is measured on gold rows only (finetune/teacher_report.py); --holdout holds out gold rows
only (`gold_holdout`).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

import numpy as np

from finetune.data import LabeledData, inner_split
from textdata.errors import DataError
from textdata.labels import label_order
from textdata.normalize import Normalizer
from textdata.prior_shift import em_prior
from textdata.tables import missing_text, read_table

SMOOTHING = 1.0  # pseudo-rows per class spread uniformly over the answers: 8 gold rows a class leave room for chance
EM_ROUNDS = 50
TEXT_WEIGHTS = (0.0, 0.25, 0.5, 1.0)  # exponents of p(class | text) tried on the gold rows (`text_weight`)


def teacher_confusion(y_gold: np.ndarray, answered: np.ndarray, n_classes: int, alpha: float = SMOOTHING) -> np.ndarray:
    """T[i, j] = P(teacher answers j | true class i), from gold rows whose teacher answer is in the label set
    (answered >= 0); rows normalised, smoothed with `alpha` pseudo-rows spread uniformly."""
    ok = answered >= 0
    counts = np.zeros((n_classes, n_classes))
    np.add.at(counts, (y_gold[ok], answered[ok]), 1.0)
    counts += alpha / n_classes
    return counts / counts.sum(1, keepdims=True)


def corrected(answered: np.ndarray, p_text: np.ndarray, T: np.ndarray, fitted_prior: np.ndarray | None = None,
              rounds: int = EM_ROUNDS, strength: float = 0.0):
    """(label, posterior) per teacher row: argmax over classes of p(true | text) * T[true, answered]. `p_text` comes
    from a model that never saw these rows' teacher labels, fitted on rows whose class mix is `fitted_prior`
    (balanced gold rows: none, uniform). The teacher rows' own class mix is estimated by EM (Saerens et al. 2002),
    held towards `fitted_prior` by `strength` pseudo-rows: without it a minority class the teacher never answers
    takes rows from its neighbour (bench/teacher.py)."""
    like = T[:, answered].T  # (rows, classes): P(this answer | true class)
    _, post = em_prior(p_text, fitted_prior, like, rounds, strength)
    return post.argmax(1), post.max(1)


def text_proba(texts: list[str], fit_rows: np.ndarray, y_fit: np.ndarray, rows: np.ndarray, n: int,
               seed: int, gold_oof: bool = False):
    """p(class | text) for `rows`, from the baseline's char TF-IDF (its vocabulary and idf from every row in
    `texts`: no label is read) and a log-loss linear model fitted on `fit_rows`. A lightly regularised SGD, not the
    baseline's logistic regression: on 8 gold rows a class that one answers near-uniform probabilities (mean top
    probability 0.32 on BBC News against 0.74), and the teacher's confusion then decides alone. With `gold_oof`:
    (p for `rows`, out-of-fold p for `fit_rows` themselves), for `text_weight`."""
    from baseline.blend import TEXT_CAP, tfidf_logreg

    vectorizer = tfidf_logreg(seed).steps[0][1]
    V = vectorizer.fit_transform([t[:TEXT_CAP] for t in texts])
    p = _fit_proba(V, fit_rows, y_fit, rows, n, seed)
    if not gold_oof:
        return p
    from sklearn.model_selection import StratifiedKFold

    oof = np.full((len(fit_rows), n), 1.0 / n)
    splits = int(min(4, np.bincount(y_fit).max()))
    for tr, va in StratifiedKFold(max(2, splits), shuffle=True, random_state=seed).split(fit_rows, y_fit):
        if len(np.unique(y_fit[tr])) > 1:
            oof[va] = _fit_proba(V, fit_rows[tr], y_fit[tr], fit_rows[va], n, seed)
    return p, oof


def _fit_proba(V, fit_rows: np.ndarray, y_fit: np.ndarray, rows: np.ndarray, n: int, seed: int) -> np.ndarray:
    from sklearn.linear_model import SGDClassifier

    model = SGDClassifier(loss="log_loss", alpha=1e-5, max_iter=30, tol=None, random_state=seed)
    model.fit(V[fit_rows], y_fit)
    p = np.zeros((len(rows), n))
    p[:, model.classes_] = model.predict_proba(V[rows])
    return p


def tempered(p: np.ndarray, weight: float) -> np.ndarray:
    """p ** weight, rows renormalised: weight 0 leaves the teacher's confusion to decide alone."""
    q = np.power(p.clip(min=1e-12), weight)
    return q / q.sum(1, keepdims=True)


def text_weight(p_oof: np.ndarray, y: np.ndarray, answered: np.ndarray, T: np.ndarray, n: int,
                fitted_prior: np.ndarray | None) -> float:
    """How much the text's p(class | text) counts against the teacher's answer: the weight in TEXT_WEIGHTS whose
    corrected labels score the best macro-F1 on the gold rows (p out-of-fold there; ties to the smaller weight).
    Where the gold-only model is weak (short texts, 8 rows a class: ko-help) trusting it relabels rows the teacher
    had right; bench/teacher.py --data ko-help measured it."""
    ok = answered >= 0
    if not ok.any():
        return 1.0
    scores = [macro_f1(y[ok], corrected(answered[ok], tempered(p_oof[ok], w), T, fitted_prior, rounds=0)[0], n)
              for w in TEXT_WEIGHTS]
    return TEXT_WEIGHTS[int(np.argmax(scores))]


def gold_repeats(n_gold: int, n_teacher: int, gold_weight: float) -> int:
    """How many times each gold row is trained on: `gold_weight` itself when >= 1; 0 (auto) makes the gold rows
    together weigh as much as the teacher rows (at least 1, at most 50)."""
    if gold_weight >= 1:
        return round(gold_weight)
    return int(np.clip(round(n_teacher / max(1, n_gold)), 1, 50))


def macro_f1(y: np.ndarray, pred: np.ndarray, n_classes: int) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y, pred, labels=list(range(n_classes)), average="macro", zero_division=0))


# ------------------------------------------------------------------------------------ the rows k-fold reads
@dataclass
class TeacherData(LabeledData):
    """LabeledData of gold and teacher rows. `y` holds the gold label of a gold row and, for a teacher row, its
    teacher label corrected on every gold row (what the final model trains on); each fold corrects again on its
    own training gold rows (`fold_training`)."""

    gold: np.ndarray | None = None  # (n,) bool: the row has a gold label
    answered: np.ndarray | None = None  # (n,) the teacher's answer as a class id; -1: none, or outside the label set
    outside: dict | None = None  # teacher answers outside the label set -> rows
    text_weights: list = dataclasses.field(default_factory=list)  # `text_weight` chosen at each correction


def load(path, cfg, normalizer: Normalizer) -> TeacherData:
    """Rows with a gold label, a teacher label, or both (the label set is the gold labels'); a teacher answer
    outside it is counted and shown, and its row (without gold) not trained on."""
    table = read_table(path, {cfg.text_column: "--text-column", cfg.label_column: "--label-column",
                              cfg.teacher_column: "--teacher-column"}, encoding=cfg.encoding)
    text_ok = ~missing_text(table[cfg.text_column]).to_numpy()
    has_gold = ~missing_text(table[cfg.label_column]).to_numpy()
    has_teacher = ~missing_text(table[cfg.teacher_column]).to_numpy()
    gold_text = table[cfg.label_column].astype(str).str.strip()
    labels = label_order(gold_text[text_ok & has_gold])
    if len(labels) < 2:
        raise DataError(f"{path}: column {cfg.label_column!r} has gold labels for {len(labels)} class(es); the gold "
                        "rows must name every class (a few rows each, e.g. 8)")
    ids = {x: i for i, x in enumerate(labels)}
    said = table[cfg.teacher_column].astype(str).str.strip()
    answered = np.where(has_teacher, said.map(ids).fillna(-1).to_numpy(), -1).astype(np.int64)
    off = has_teacher & (answered < 0) & text_ok
    outside = {str(k): int(v) for k, v in said[off].value_counts().items()}
    if outside:
        listed = ", ".join(f"{k!r} ({v} rows)" for k, v in list(outside.items())[:10])
        print(f"warning: {path}: {int(off.sum())} teacher answers in {cfg.teacher_column!r} are outside the gold label "
              f"set {labels}: {listed}; rows without a gold label among them are not trained on", file=sys.stderr)
    keep = np.flatnonzero(text_ok & (has_gold | (answered >= 0)))
    dropped = {k: v for k, v in {"empty text": int((~text_ok).sum()),
                                 "no gold label and no usable teacher label": int((text_ok & ~has_gold & (answered < 0)).sum())}.items() if v}
    gold = has_gold[keep]
    y = np.where(gold, gold_text.iloc[keep].map(ids).fillna(-1).to_numpy(), answered[keep]).astype(np.int64)
    small = [x for x in labels if (y[gold] == ids[x]).sum() < 2]
    if small:
        raise DataError(f"{path}: classes {small} have fewer than 2 gold rows; the teacher is judged and corrected on "
                        "the gold rows, so every class needs a few (8 or more)")
    texts = [normalizer(t) for t in table[cfg.text_column].iloc[keep].astype(str)]
    groups = table[cfg.group_column].astype(str).to_numpy()[keep] if cfg.group_column else None
    data = TeacherData(table=table, keep=keep, texts=texts, y=y, groups=groups, labels=labels, dropped=dropped,
                       gold=gold, answered=answered[keep], outside=outside)
    teach = ~gold
    data.y[teach] = correct_rows(data, np.flatnonzero(gold), np.flatnonzero(teach), cfg.seed)
    return data


def correct_rows(data: TeacherData, gold_rows: np.ndarray, teacher_rows: np.ndarray, seed: int) -> np.ndarray:
    """The corrected labels of `teacher_rows`, judged on `gold_rows` only: T counted there, p(class | text) fitted
    there (`text_proba`, its vocabulary from both kinds of rows' texts) and weighed by `text_weight`, chosen there."""
    answered = data.answered[teacher_rows]
    if len(teacher_rows) == 0:
        return answered
    n = len(data.labels)
    T = teacher_confusion(data.y[gold_rows], data.answered[gold_rows], n)
    both = np.concatenate([gold_rows, teacher_rows])
    try:
        p, p_gold = text_proba([data.texts[i] for i in both], np.arange(len(gold_rows)), data.y[gold_rows],
                               np.arange(len(gold_rows), len(both)), n, seed, gold_oof=True)
    except ValueError:  # no usable text (an empty vocabulary): the teacher's answers stand
        return answered
    fitted = np.bincount(data.y[gold_rows], minlength=n) / len(gold_rows)
    weight = text_weight(p_gold, data.y[gold_rows], data.answered[gold_rows], T, n, fitted)
    data.text_weights.append(weight)
    return corrected(answered, tempered(p, weight), T, fitted, strength=len(gold_rows))[0]


def fold_training(data: TeacherData, train_idx: np.ndarray, fit_idx: np.ndarray, seed: int,
                  gold_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """(targets, rows to fit on) for one fold: the fold's teacher rows corrected on its own training gold rows
    (never the held-out ones), each gold row of `fit_idx` repeated `gold_repeats` times."""
    targets = data.y.copy()
    gold_tr = train_idx[data.gold[train_idx]]
    teach_tr = train_idx[~data.gold[train_idx]]
    targets[teach_tr] = correct_rows(data, gold_tr, teach_tr, seed)
    return targets, repeated(data, fit_idx, gold_weight)


def repeated(data: TeacherData, rows: np.ndarray, gold_weight: float) -> np.ndarray:
    is_gold = data.gold[rows]
    k = gold_repeats(int(is_gold.sum()), int((~is_gold).sum()), gold_weight)
    return np.sort(np.concatenate([rows, np.repeat(rows[is_gold], k - 1)]))


def subset(data: TeacherData, pos: np.ndarray) -> TeacherData:
    pos = np.sort(pos)
    return dataclasses.replace(data, keep=data.keep[pos], texts=[data.texts[i] for i in pos], y=data.y[pos],
                               groups=None if data.groups is None else data.groups[pos], gold=data.gold[pos],
                               answered=data.answered[pos])


def gold_holdout(data: TeacherData, fraction: float, folds: int, seed: int, path) -> tuple[TeacherData, TeacherData]:
    """--holdout with --teacher-column: (rows for the folds and the final model, held-out rows). The held-out rows
    are gold rows only (every score is on gold rows), about `fraction` of them, stratified (whole groups when
    grouped); every teacher row stays in. The teacher rows are corrected again on the gold rows left: the held-out
    gold labels never reach a training label."""
    g = np.flatnonzero(data.gold)
    _, held_pos = inner_split(data.y[g], None if data.groups is None else data.groups[g], fraction, seed)
    if len(held_pos) == 0:
        raise DataError(f"{path}: --holdout {fraction}: too few gold rows per class to hold any out")
    held_rows = g[held_pos]
    cv = subset(data, np.setdiff1d(np.arange(len(data.y)), held_rows))
    counts = np.bincount(cv.y[cv.gold], minlength=len(data.labels))
    if counts.min() < 2:
        name = data.labels[int(counts.argmin())]
        raise DataError(f"{path}: after --holdout {fraction}, class {name!r} has {int(counts.min())} gold rows left: "
                        "the teacher is judged and corrected on the gold rows; lower --holdout or label more")
    teach = ~cv.gold
    cv.text_weights = []  # the correction on every gold row, holdout included, is not used
    cv.y[teach] = correct_rows(cv, np.flatnonzero(cv.gold), np.flatnonzero(teach), seed)
    return cv, subset(data, held_rows)
