"""Learning from an LLM's labels and a few gold ones (finetune/kfold.py --teacher-column): the rules, in one place.

A row with a gold label is gold; a row with only the teacher's answer is teacher-labelled. Three rules:
- the teacher is judged on gold rows only: its confusion T[true, answered] is counted on the gold rows the
  model is allowed to see (a fold's training rows, nested), smoothed towards uniform;
- a teacher label is corrected where the gold rows say it is unreliable: the row's label becomes the argmax of
  p(true | text) ** w * T[true, answered] * (the teacher rows' class mix, by EM), p from a model fitted on the gold
  rows alone. A class the teacher never answers (gold rows have it, the teacher column never names it) is answered
  as a neighbour instead: T's column for that neighbour then holds both classes, and there the text decides at full
  weight (`absorbing`); elsewhere the text's weight w is chosen on the gold rows (`text_weight`; 0: the teacher's
  answer stands);
- gold rows weigh more: repeated `gold_repeats` times in training (the measured choice: bench/teacher.py).
Every score of a teacher run is measured on gold rows only (finetune/teacher_report.py); --holdout holds out gold rows
only (`gold_holdout`).

With --multi-label the rules are the same, label by label: each label is a two-class problem (has it / has it not)
with its own T, p(label | text) and text weight. An empty cell means "no answer" in both columns, so a gold or
teacher answer of no label at all is written `[]` (LabelSpace.marked; finetune.teach writes it so).
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from dataclasses import dataclass

import numpy as np

from finetune.data import LabeledData, inner_split, rows_at
from textdata.errors import DataError
from textdata.labels import DEFAULT_SEP, LabelSpace, label_order
from textdata.normalize import Normalizer
from textdata.prior_shift import em_prior
from textdata.tables import missing_text, read_table

SMOOTHING = 1.0  # pseudo-rows per class spread uniformly over the answers: 8 gold rows a class leave room for chance
EM_ROUNDS = 50
# exponents of p(class | text) tried on the gold rows (`text_weight`); 0: the teacher's answer stands
TEXT_WEIGHTS = (0.0, 0.25, 0.5, 1.0)


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


def text_vectors(texts: list[str], seed: int):
    """The baseline's char TF-IDF of `texts` (vocabulary and idf from every text given: no label is read)."""
    from baseline.blend import TEXT_CAP, tfidf_logreg

    return tfidf_logreg(seed).steps[0][1].fit_transform([t[:TEXT_CAP] for t in texts])


def text_proba(V, fit_rows: np.ndarray, y_fit: np.ndarray, rows: np.ndarray, n: int, seed: int):
    """(p(class | text) for `rows`, out-of-fold p for `fit_rows` themselves, for `text_weight`), from a log-loss
    linear model on `text_vectors` fitted on `fit_rows`. A lightly regularised SGD, not the baseline's logistic
    regression: on 8 gold rows a class that one answers near-uniform probabilities (mean top probability 0.32 on
    BBC News against 0.74), and the teacher's confusion then decides alone."""
    from sklearn.model_selection import StratifiedKFold

    p = _fit_proba(V, fit_rows, y_fit, rows, n, seed)
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


def tempered(p: np.ndarray, weight) -> np.ndarray:
    """p ** weight (one weight, or one a row), rows renormalised."""
    q = np.power(p.clip(min=1e-12), np.reshape(weight, (-1, 1)))
    return q / q.sum(1, keepdims=True)


def absorbing(y_gold: np.ndarray, said_gold: np.ndarray, answered: np.ndarray, n: int) -> np.ndarray:
    """(n,) bool: the answers that stand for a class the teacher never gives (its gold rows got them), e.g. `business`
    for `tech`. A class is never given when gold rows have it and no answer names it, neither on the gold rows
    (`said_gold`) nor on the teacher rows (`answered`); -1 is no answer."""
    named = np.zeros(n, bool)
    for a in (said_gold, answered):
        named[a[a >= 0]] = True
    never = np.zeros(n, bool)
    never[y_gold] = True
    never &= ~named
    out = np.zeros(n, bool)
    out[said_gold[(said_gold >= 0) & never[y_gold]]] = True
    return out


def relabelled(answered: np.ndarray, p: np.ndarray, T: np.ndarray, weight: float, full: np.ndarray,
               fitted_prior: np.ndarray | None, rounds: int = EM_ROUNDS, strength: float = 0.0) -> np.ndarray:
    """The teacher rows' labels at text weight `weight` (`corrected` on the rows it touches): rows whose answer is in
    `full` (`absorbing`) take the text at full weight, the others at `weight`; at 0 their answer stands (not T and
    the class mix alone: with 8 gold rows a class one slip in T outweighs a rare answer, bench/teacher.py debtags)."""
    w = np.where(full[answered.clip(min=0)], 1.0, weight)
    out = answered.copy()
    touched = (w > 0) & (answered >= 0)
    if touched.any():
        out[touched] = corrected(answered[touched], tempered(p[touched], w[touched]), T, fitted_prior, rounds,
                                 strength)[0]
    return out


def text_weight(p_oof: np.ndarray, y: np.ndarray, answered: np.ndarray, T: np.ndarray, n: int,
                fitted_prior: np.ndarray | None, full: np.ndarray | None = None) -> float:
    """How much the text's p(class | text) counts against the teacher's answer outside the `full` answers
    (`absorbing`): the weight in TEXT_WEIGHTS whose labels (`relabelled`) score the best macro-F1 on the gold rows (p
    out-of-fold there). Ties go to the larger weight: on 8 gold rows a class the weights often tie, and a small one
    lets the teacher rows' class mix outvote a flattened p (bench/teacher.py: `tech` F1 0 on BBC at 0.25). Where
    the gold-only model is weak (short texts, 8 rows a class: ko-help) trusting it relabels rows the teacher had
    right; bench/teacher.py --data ko-help measured it."""
    scores = weight_scores(p_oof, y, answered, T, n, fitted_prior, full)
    if not scores:
        return 1.0
    return TEXT_WEIGHTS[max(i for i, x in enumerate(scores) if x >= max(scores) - 1e-9)]


def weight_scores(p_oof: np.ndarray, y: np.ndarray, answered: np.ndarray, T: np.ndarray, n: int,
                  fitted_prior: np.ndarray | None, full: np.ndarray | None = None) -> list[float]:
    """`text_weight`'s nested scores: the gold rows' macro-F1 at each of TEXT_WEIGHTS ([] when no gold row has an
    answer)."""
    ok = answered >= 0
    if not ok.any():
        return []
    full = np.zeros(n, bool) if full is None else full
    return [macro_f1(y[ok], relabelled(answered[ok], p_oof[ok], T, w, full, fitted_prior, rounds=0), n)
            for w in TEXT_WEIGHTS]


def corrected_answers(p: np.ndarray, p_fit: np.ndarray, y_fit: np.ndarray, said_fit: np.ndarray,
                      answered: np.ndarray, n: int, fitted_prior: np.ndarray | None) -> tuple[np.ndarray, float]:
    """(the corrected labels of teacher rows answered `answered`, the text weight chosen): T counted on the gold rows
    (true `y_fit`, answered `said_fit`), p(class | text) for the teacher rows (`p`) and out-of-fold for the gold rows
    (`p_fit`); the rule k-fold runs (`correct_rows`) and bench/teacher.py measures."""
    T = teacher_confusion(y_fit, said_fit, n)
    full = absorbing(y_fit, said_fit, answered, n)
    weight = text_weight(p_fit, y_fit, said_fit, T, n, fitted_prior, full)
    return relabelled(answered, p, T, weight, full, fitted_prior, strength=len(y_fit)), weight


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
    """LabeledData of gold and teacher rows. `targets` (y, or Y with --multi-label) hold the gold label of a gold
    row and, for a teacher row, its teacher label corrected on every gold row (what the final model trains on);
    each fold corrects again on its own training gold rows (`fold_training`)."""

    gold: np.ndarray | None = None  # (n,) bool: the row has a gold label
    # the teacher's answer in the targets' form (a class id; multi-label: 0/1 per label), -1 (the whole row) where
    # it gave none or one outside the label set (`has_answer`)
    answered: np.ndarray | None = None
    outside: dict | None = None  # teacher answers outside the label set -> rows
    text_weights: list = dataclasses.field(default_factory=list)  # `text_weight` chosen at each correction (per label)


def has_answer(answered: np.ndarray) -> np.ndarray:
    """(n,) bool: the rows of `answered` (TeacherData's) with a teacher answer in the label set."""
    return answered.reshape(len(answered), -1)[:, 0] >= 0


def load(path, cfg, normalizer: Normalizer) -> TeacherData:
    """Rows with a gold label, a teacher label, or both (the label set is the gold labels'); a teacher answer
    outside it is counted and shown, and its row (without gold) not trained on. A gold cell no label rule allows is
    an error naming the row, the column and the value."""
    table = read_table(path, {cfg.text_column: "--text-column", cfg.label_column: "--label-column",
                              cfg.teacher_column: "--teacher-column"}, encoding=cfg.encoding)
    space = LabelSpace.of((), getattr(cfg, "multi_label", False), getattr(cfg, "label_sep", None))
    text_ok = ~missing_text(table[cfg.text_column]).to_numpy()
    cells = table[cfg.label_column]
    has_gold = text_ok & cells.map(space.given).to_numpy(bool)
    gold_sets = {i: space.parse(cells.iat[i], f"{path}: data row {i + 1} (line {i + 2} of a CSV with a header), "
                                              f"column {cfg.label_column!r}") for i in np.flatnonzero(has_gold)}
    labels = label_order(x for names in gold_sets.values() for x in names)
    if len(labels) < space.pick(2, 1):
        raise DataError(f"{path}: column {cfg.label_column!r} has gold labels for {len(labels)} class(es); the gold "
                        "rows must name every class (a few rows each, e.g. 8)")
    space = space.with_labels(labels)
    answered, outside = teacher_answers(table[cfg.teacher_column], space, text_ok)
    if outside:
        listed = ", ".join(f"{k!r} ({v} rows)" for k, v in list(outside.items())[:10])
        print(f"warning: {path}: {sum(outside.values())} teacher answers in {cfg.teacher_column!r} are outside the gold "
              f"label set {labels}: {listed}; rows without a gold label among them are not trained on", file=sys.stderr)
    said = has_answer(answered)
    keep = np.flatnonzero(text_ok & (has_gold | said))
    dropped = {k: v for k, v in {"empty text": int((~text_ok).sum()),
                                 "no gold label and no usable teacher label": int((text_ok & ~has_gold & ~said).sum())}.items() if v}
    targets = answered[keep].copy()
    for pos, i in enumerate(keep):
        if has_gold[i]:
            targets[pos] = as_target(space, gold_sets[i])
    gold = has_gold[keep]
    small = short_classes(space, targets[gold])
    if small:
        raise DataError(f"{path}: {space.pick('classes', 'labels')} {small} have fewer than 2 gold rows"
                        f"{space.pick('', ' with them (or 2 without)')}; the teacher is judged and corrected on the gold "
                        "rows, so every class needs a few (8 or more)")
    texts = [normalizer(t) for t in table[cfg.text_column].iloc[keep].astype(str)]
    groups = table[cfg.group_column].astype(str).to_numpy()[keep] if cfg.group_column else None
    data = TeacherData(table=table, keep=keep, texts=texts, y=space.pick(targets, None), groups=groups, labels=labels,
                       dropped=dropped, multi_label=space.multi_label, Y=space.pick(None, targets),
                       label_sep=space.sep or DEFAULT_SEP, gold=gold, answered=answered[keep], outside=outside)
    teach = ~gold
    data.targets[teach] = correct_rows(data, np.flatnonzero(gold), np.flatnonzero(teach), cfg.seed)
    return data


def as_target(space: LabelSpace, names: list[str]):
    """Label names as one row of targets: a class id, or 0/1 per label."""
    return space.pick(lambda: space.labels.index(names[0]), lambda: space.matrix([names])[0][0])()


def teacher_answers(cells, space: LabelSpace, rows: np.ndarray) -> tuple[np.ndarray, dict]:
    """(the teacher's answers on `rows` in the targets' form, -1 where none; the answers outside the label set ->
    rows). An answer is outside when it names a label the gold rows do not, or is no label name at all (an LLM's
    sentence): counted, never an error, never mapped to a label."""
    answered = np.full(space.pick((len(cells),), (len(cells), len(space.labels))), -1, np.int64)
    outside: Counter = Counter()
    for i in np.flatnonzero(rows):
        cell = cells.iat[i]
        if not space.given(cell):
            continue
        try:
            names = space.parse(cell)
        except DataError:
            names = None
        if names is None or not set(names) <= set(space.labels):
            outside[str(cell).strip()] += 1
        else:
            answered[i] = as_target(space, names)
    return answered, dict(outside.most_common())


def short_classes(space: LabelSpace, targets: np.ndarray) -> list[str]:
    """The classes with fewer than 2 rows in `targets` (multi-label: the labels with fewer than 2 rows carrying
    them, or fewer than 2 not)."""
    n = len(space.labels)
    counts = space.pick(lambda: np.bincount(targets, minlength=n)[None],
                        lambda: np.stack([targets.sum(0), (1 - targets).sum(0)]).reshape(2, n))()
    return [space.labels[j] for j in np.flatnonzero(counts.min(0) < 2)]


def correct_rows(data: TeacherData, gold_rows: np.ndarray, teacher_rows: np.ndarray, seed: int) -> np.ndarray:
    """The corrected labels of `teacher_rows`, judged on `gold_rows` only: T counted there, p(class | text) fitted
    there (`text_proba`, its vocabulary from both kinds of rows' texts) and weighed by `text_weight`, chosen there.
    Multi-label: label by label, each a two-class problem."""
    answered = data.answered[teacher_rows]
    if len(teacher_rows) == 0:
        return answered
    both = np.concatenate([gold_rows, teacher_rows])
    try:
        V = text_vectors([data.texts[i] for i in both], seed)
    except ValueError:  # no usable text (an empty vocabulary): the teacher's answers stand
        return answered
    fit, rows = np.arange(len(gold_rows)), np.arange(len(gold_rows), len(both))
    truth, said = data.targets[gold_rows], data.answered[gold_rows]

    def one(y_fit, said_fit, ans, n):
        return _corrected_column(V, fit, rows, y_fit, said_fit, ans, n, seed, data.text_weights)

    return data.space.pick(
        lambda: one(truth, said, answered, len(data.labels)),
        lambda: np.stack([one(truth[:, j], said[:, j], answered[:, j], 2) for j in range(len(data.labels))], 1))()


def _corrected_column(V, fit, rows, y_fit, said_fit, answered, n: int, seed: int, weights: list) -> np.ndarray:
    """One class problem's corrected teacher answers (`correct_rows`); `weights` gets the text weight chosen."""
    if len(np.unique(y_fit)) < 2:  # a fold's gold rows without one side of a label: nothing to judge it on
        return answered
    p, p_fit = text_proba(V, fit, y_fit, rows, n, seed)
    labels, weight = corrected_answers(p, p_fit, y_fit, said_fit, answered, n, np.bincount(y_fit, minlength=n) / len(y_fit))
    weights.append(weight)
    return labels


def fold_training(data: TeacherData, train_idx: np.ndarray, fit_idx: np.ndarray, seed: int,
                  gold_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """(targets, rows to fit on) for one fold: the fold's teacher rows corrected on its own training gold rows
    (never the held-out ones), each gold row of `fit_idx` repeated `gold_repeats` times."""
    targets = data.targets.copy()
    gold_tr = train_idx[data.gold[train_idx]]
    teach_tr = train_idx[~data.gold[train_idx]]
    targets[teach_tr] = correct_rows(data, gold_tr, teach_tr, seed)
    return targets, repeated(data, fit_idx, gold_weight)


def repeated(data: TeacherData, rows: np.ndarray, gold_weight: float) -> np.ndarray:
    is_gold = data.gold[rows]
    k = gold_repeats(int(is_gold.sum()), int((~is_gold).sum()), gold_weight)
    return np.sort(np.concatenate([rows, np.repeat(rows[is_gold], k - 1)]))


def gold_holdout(data: TeacherData, fraction: float, folds: int, seed: int, path) -> tuple[TeacherData, TeacherData]:
    """--holdout with --teacher-column: (rows for the folds and the final model, held-out rows). The held-out rows
    are gold rows only (every score is on gold rows), about `fraction` of them, stratified (whole groups when
    grouped); every teacher row stays in. The teacher rows are corrected again on the gold rows left: the held-out
    gold labels never reach a training label."""
    g = np.flatnonzero(data.gold)
    _, held_pos = inner_split(data.targets[g], None if data.groups is None else data.groups[g], fraction, seed)
    if len(held_pos) == 0:
        raise DataError(f"{path}: --holdout {fraction}: too few gold rows per class to hold any out")
    held_rows = g[held_pos]
    cv = rows_at(data, np.setdiff1d(np.arange(len(data.texts)), held_rows))
    small = short_classes(cv.space, cv.targets[cv.gold])
    if small:
        raise DataError(f"{path}: after --holdout {fraction}, {small} have fewer than 2 gold rows left: the teacher "
                        "is judged and corrected on the gold rows; lower --holdout or label more")
    teach = ~cv.gold
    cv.text_weights = []  # the correction on every gold row, holdout included, is not used
    cv.targets[teach] = correct_rows(cv, np.flatnonzero(cv.gold), np.flatnonzero(teach), seed)
    return cv, rows_at(data, held_rows)
