"""Out of domain: how unlike the training rows a text is, in the baseline's char TF-IDF space. k-fold fits it
(finetune/confidence.py, on out-of-fold rows), the model folder carries it (ood/: JSON and safetensors, no
pickle), serving applies it with numpy alone (serving/calibration.py): a text under the cut is answered
`confident: false` with the reason "out of domain", whatever its score.

Two similarities of a text x (its TF-IDF vector, l2-normalised with the n-grams the vocabulary lacks counted in
the norm at the rarest weight, so a Korean paragraph read by an English vocabulary is not "similar" for the
few Latin letters it shares):

    neighbours:  the mean cosine to its NEIGHBOURS nearest training rows, over the n-grams at most COMMON_DF
                 of the rows share (an inverted index: the common ones cost most and tell rows apart least)
    centroid:    the largest cosine to a class's mean vector

Each is turned into its out-of-fold percentile (the share of training rows, scored by the other folds, that
are less typical). A text's typicality (COMBINE "centroid", fitted since issue 42's resplits) is its centroid
percentile, or its neighbours percentile where that is below every training row's (a Korean paragraph to an
English model shares no rare n-gram with any row). Since issue 42's length measurement (COMBINE
"centroid*length"; "centroid" folders keep theirs) that centroid typicality is multiplied by the out-of-fold
percentile of the text's length score (minus the distance of log(1 + its char n-gram count, the read's
`totals`) to the training rows' median) and the product re-ranked on the out-of-fold rows' products; a text
under every training row stays there. Off-topic texts of another length than the training rows (package
synopses to a news model) fell from 2 to 6 of 10 resplits meeting both goals at BBC target 0.8, the rest held
(docs/notes/log.md, "Better-separating scores"). The cut is the highest typicality, among the out-of-fold
rows' own, that costs them at most MAX_DROP of their confident answers, and at most MAX_CUT (a text less
typical than 95% of the training rows; above it the allowance of a model that answers few rows was spent inside
the in-domain bulk and did not transfer to unseen rows, while no off-topic set sat there). Why the rest (5 resplits of a
BBC model, docs/notes/log.md, "A cut that leaked"): package synopses sit just under the in-domain rows' 1% centroid percentile, so a
cut on a 0.005 grid (0.005 or 0.01) let 7-43% of them through in 3 of 5 resplits; and the neighbours percentile,
which in "the smaller of the two" (COMBINE "min", older folders) spent half the flagged in-domain rows, caught
almost none of them (33-44% through on its own).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from baseline.tfidf import CharTfidf, Read, grams
from textdata.nested import nested

OOD_DIR = "ood"  # inside a model folder: ood.json (settings, vocabulary, percentiles, cut), index.safetensors
NEIGHBOURS = 5
COMMON_DF = 0.05
MAX_DROP = 0.015  # of the out-of-fold rows' confident answers; the issue allows 2 points at serving
MAX_CUT = 0.05  # the cut never above the 5% least typical training rows (issue 42's resplits; choose_cut)
LEVELS = np.linspace(0.0, 1.0, 201)  # percentiles stored per similarity
CHUNK = 32  # rows scored at once: the neighbour scores are a (rows, training rows) matrix
REASON = "out of domain"
COMBINE = "centroid*length"  # how a typicality is made (percentile()); "centroid" / "min" in folders fitted before
COMBINES = ("min", "centroid", "centroid*length")
FLOOR = 1e-3  # "centroid*length": each percentile clipped to [FLOOR, 1] before the product (docs/notes/log.md, "Better-separating scores")


@dataclass
class Index:
    """A fitted vocabulary and the training rows it indexes."""

    tfidf: CharTfidf
    centroids_t: np.ndarray  # (vocabulary, classes) float32: each class's mean vector, l2-normalised
    ptr: np.ndarray  # (vocabulary + 1,) int64: column j's postings are [ptr[j], ptr[j + 1])
    post_row: np.ndarray  # int32 training row of each posting
    post_val: np.ndarray  # float32 its weight
    n_rows: int

    def vectors(self, texts: list[str], read: Read | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, column, value): l2-normalised with unknown n-grams in the norm at the largest idf. `read`:
        this vocabulary's `CharTfidf.read(texts)` where the caller has it (the served baseline's, shared)."""
        return self.vectors_and_totals(texts, read)[:3]

    def vectors_and_totals(self, texts: list[str], read: Read | None = None) -> tuple[np.ndarray, ...]:
        """`vectors` and each text's n-gram count, known or not (the read's `totals`: the length score's input)."""
        tf = self.tfidf
        (row, col, count, val), totals = tf.read(texts) if read is None else read
        n = len(texts)
        unknown = np.maximum(0, totals - np.bincount(row, count, minlength=n))
        norm = np.sqrt(np.bincount(row, val * val, minlength=n) + unknown * float(tf.idf.max()) ** 2)
        return row, col, val / np.where(norm > 0, norm, 1.0)[row], np.asarray(totals)

    def similarities(self, texts: list[str], read: Read | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(neighbours, centroid) per text: the texts read once, then searched CHUNK rows at a time (the rows
        come sorted, so a chunk is a slice)."""
        return self.search(*self.vectors(texts, read), len(texts))

    def search(self, row: np.ndarray, col: np.ndarray, x: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        nb, cen = np.zeros(n), np.zeros(n)
        cut = np.searchsorted(row, np.arange(0, n + CHUNK, CHUNK))
        for i, a in enumerate(range(0, n, CHUNK)):
            part = slice(cut[i], cut[i + 1])
            b = min(CHUNK, n - a)
            nb[a:a + b], cen[a:a + b] = self._chunk(row[part] - a, col[part], x[part], b)
        return nb, cen

    def _chunk(self, row: np.ndarray, col: np.ndarray, x: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
        cen = np.zeros((b, self.centroids_t.shape[1]))
        if len(row):
            present, first = np.unique(row, return_index=True)
            cen[present] = np.add.reduceat(x[:, None] * self.centroids_t[col], first)
        length = self.ptr[col + 1] - self.ptr[col]
        total = int(length.sum())
        start = np.repeat(self.ptr[col] - (np.cumsum(length) - length), length)
        at = start + np.arange(total)  # each posting of each of the texts' n-grams
        sims = np.bincount(np.repeat(row, length) * self.n_rows + self.post_row[at],
                           np.repeat(x, length) * self.post_val[at], minlength=b * self.n_rows).reshape(b, -1)
        k = min(NEIGHBOURS, self.n_rows)
        nb = np.partition(sims, self.n_rows - k, axis=1)[:, -k:].mean(1)
        return nb, cen.max(1)


def vectorizer_settings() -> dict:
    """The baseline's vectorizer settings (baseline/blend.py tfidf_logreg), as tfidf.json stores them."""
    from baseline.blend import _VECTORIZER_KEYS, tfidf_logreg

    params = tfidf_logreg(0).steps[0][1].get_params()
    return {k: (list(params[k]) if k == "ngram_range" else params[k]) for k in _VECTORIZER_KEYS}


def build_index(texts: list[str], y: np.ndarray, n_classes: int) -> Index:
    """The vocabulary fitted on `texts` (sklearn, as the baseline's) and the rows indexed with numpy."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    settings = vectorizer_settings()
    vec = TfidfVectorizer(**{k: tuple(v) if k == "ngram_range" else v for k, v in settings.items()},
                          min_df=2, max_features=200_000).fit(texts)
    return index_rows(CharTfidf(settings, grams(vec.vocabulary_), vec.idf_), texts, y, n_classes)


def index_rows(tf: CharTfidf, texts: list[str], y: np.ndarray, n_classes: int) -> Index:
    shell = Index(tf, np.zeros((len(tf.idf), n_classes), np.float32), np.zeros(len(tf.idf) + 1, np.int64),
                  np.zeros(0, np.int32), np.zeros(0, np.float32), len(texts))
    row, col, x = shell.vectors(texts)
    y = np.asarray(y)
    cent = np.zeros((len(tf.idf), n_classes))
    if y.ndim == 2:  # multi-label (rows x labels, 0/1): each label's centroid is the mean of the rows it is on
        np.add.at(cent, col, x[:, None] * y[row])
    else:
        np.add.at(cent, (col, y[row]), x)
    cent /= np.maximum(np.linalg.norm(cent, axis=0, keepdims=True), 1e-12)
    df = np.bincount(col, minlength=len(tf.idf))
    keep = df[col] <= max(NEIGHBOURS, COMMON_DF * len(texts))
    order = np.lexsort((row[keep], col[keep]))
    c = col[keep][order]
    ptr = np.zeros(len(tf.idf) + 1, np.int64)
    ptr[1:] = np.cumsum(np.bincount(c, minlength=len(tf.idf)))
    return Index(tf, cent.astype(np.float32), ptr, row[keep][order].astype(np.int32),
                 x[keep][order].astype(np.float32), len(texts))


@dataclass(frozen=True)
class LengthRank:
    """"centroid*length"'s reference, out of fold: the length score (minus the distance of log(1 + the text's
    char n-gram count) to the training rows' median: too long is as unlike them as too short) at each of
    LEVELS, and the product of the two percentiles at each of LEVELS (the product re-ranked on those rows)."""

    median: float  # of log1p(n-gram count) over every training row (the final index's)
    length_q: np.ndarray
    product_q: np.ndarray

    def score(self, totals: np.ndarray) -> np.ndarray:
        return -np.abs(np.log1p(np.asarray(totals, float)) - self.median)


@dataclass
class Typicality:
    """A fitted index with the out-of-fold percentiles of its two similarities (and of the length) and the cut."""

    index: Index
    neighbours_q: np.ndarray  # the similarity at each of LEVELS, out of fold
    centroid_q: np.ndarray
    cut: float  # a text whose typicality is below it is out of domain
    meta: dict
    combine: str = "min"  # percentile(): what the cut was chosen for (ood.json; "min" where absent)
    rank: LengthRank | None = None  # "centroid*length" only

    def typicality(self, texts: list[str], read: Read | None = None) -> np.ndarray:
        row, col, x, totals = self.index.vectors_and_totals(texts, read)
        nb, cen = self.index.search(row, col, x, len(texts))
        length = None if self.rank is None else self.rank.score(totals)
        return percentile(nb, cen, self.neighbours_q, self.centroid_q, self.combine, length, self.rank)

    def in_domain(self, texts: list[str], read: Read | None = None) -> np.ndarray:
        return self.typicality(texts, read) >= self.cut

    def reads_like(self, tfidf: CharTfidf) -> bool:
        """Does `tfidf` (the served baseline's) read texts as this index does: then one `read` serves both. So
        it does after --final, where both are fitted on every row with the same settings."""
        mine = self.index.tfidf
        return (mine.settings == tfidf.settings and len(mine.idf) == len(tfidf.idf)
                and mine.vocabulary == tfidf.vocabulary and np.array_equal(mine.idf, tfidf.idf))

    def info(self) -> dict:
        length = ", times the text's length rank" if self.rank is not None else ""
        return {"method": f"TF-IDF typicality (nearest training rows and class centroids{length})", "cut": self.cut,
                "combine": self.combine, **self.meta}


def percentile(nb, cen, neighbours_q, centroid_q, combine: str = COMBINE, length=None,
               rank: LengthRank | None = None) -> np.ndarray:
    """A text's typicality from its out-of-fold percentiles; below the least typical training row each goes
    on down to -1 at similarity 0, so that a cut of 0 still flags texts less typical than every training row.
    "centroid": the centroid percentile, or the neighbours one where it is below 0 (under every row); "min":
    the smaller of the two; "centroid*length": where "centroid" is not below 0, the product of it and the
    percentile of `length` (`rank.score`), re-ranked on the out-of-fold rows' products (`rank.product_q`)."""
    def level(x, q):
        return np.interp(x, np.r_[0.0, q], np.r_[-1.0, LEVELS]) if q[0] > 0 else np.interp(x, q, LEVELS)

    near = level(nb, neighbours_q)
    if combine != "min":
        near = np.where(near < 0, near, np.inf)
    served = np.minimum(near, level(cen, centroid_q))
    if combine != "centroid*length":
        return served
    return np.where(served < 0, served, _rank(_product(served, length, rank.length_q), rank.product_q))


def _rank(x, q):
    """The share of the out-of-fold rows under x (under every one: just below 0)."""
    return np.interp(x, q, LEVELS, left=-FLOOR)


def _product(served, length, length_q):
    """"centroid*length" before its re-ranking: the centroid typicality times the length score's percentile."""
    return np.clip(served, FLOOR, 1.0) * np.clip(_rank(length, length_q), FLOOR, 1.0)


def fit_levels(nb, cen, totals, fold_of, combine: str = COMBINE) -> tuple:
    """(neighbours_q, centroid_q, rank, each out-of-fold row's typicality) from the rows' out-of-fold
    similarities and n-gram counts: a row's length score uses the median of the other folds' rows, as its
    similarities use their index; `rank` is None unless `combine` is "centroid*length"."""
    nq, cq = np.quantile(nb, LEVELS), np.quantile(cen, LEVELS)
    if combine != "centroid*length":
        return nq, cq, None, percentile(nb, cen, nq, cq, combine)
    logn, fold_of, length = np.log1p(np.asarray(totals, float)), np.asarray(fold_of), np.zeros(len(nb))
    for k in np.unique(fold_of):
        held = fold_of == k
        length[held] = -np.abs(logn[held] - np.median(logn[~held]))
    length_q = np.quantile(length, LEVELS)
    product = _product(percentile(nb, cen, nq, cq, "centroid"), length, length_q)
    rank = LengthRank(float(np.median(logn)), length_q, np.quantile(product, LEVELS))
    return nq, cq, rank, percentile(nb, cen, nq, cq, combine, length, rank)


def choose_cut(level: np.ndarray, sure: np.ndarray, max_drop: float = MAX_DROP, max_cut: float = MAX_CUT) -> float:
    """The highest cut, at most `max_cut`, that flags (typicality < cut) confident rows `sure` on at most
    `max_drop` of all rows: the typicality of the confident row one past that allowance (a row's own level, not a
    0.005 grid, where a step over a few tail rows moved the cut by half and let a third of an off-topic set
    through), 0 at the least (flag only texts under every training row).
    Why `max_cut` (0.5 before): a model that answers few rows (coverage 0.1-0.3) spent its allowance, 10% of its
    answers, at cuts of 0.12-0.29, inside the in-domain rows' bulk, where unseen pages or a final model that
    answers more cost 2.1-3.5 points in 3 of 8 resplits; no off-topic set sat above 0.05 there
    (docs/notes/log.md, "MAX_CUT 0.05")."""
    level, sure = np.asarray(level, float), np.asarray(sure, bool)
    allowed = int(np.floor(max_drop * len(level) + 1e-9))
    confident_levels = np.sort(level[sure])
    cut = confident_levels[allowed] if allowed < len(confident_levels) else max_cut
    return float(min(max(cut, 0.0), max_cut))


def fit_typicality(texts: list[str], y: np.ndarray, fold_of: np.ndarray, n_classes: int,
                   confident: np.ndarray | None = None) -> tuple[Typicality, dict]:
    """(the detector the final folder serves: indexed on every row, with out-of-fold percentiles and cut;
    report["out_of_domain"]). Fold k's rows are scored by an index of the other folds' rows only. `y`: class
    ids, or multi-label rows x labels 0/1 (a centroid per label).
    `confident`: the out-of-fold rows answered confidently as served (None: all)."""
    y, fold_of = np.asarray(y), np.asarray(fold_of)
    rows = lambda mask: [texts[i] for i in np.flatnonzero(mask)]
    both, _ = nested(fold_of, lambda rest: build_index(rows(rest), y[rest], n_classes),
                     lambda ix, held: np.stack(ix.similarities(rows(held)), 1), np.zeros((len(texts), 2)))
    final = build_index(texts, y, n_classes)
    nq, cq, rank, level = fit_levels(both[:, 0], both[:, 1], final.tfidf.read(texts).totals, fold_of)
    sure = np.ones(len(texts), bool) if confident is None else np.asarray(confident, bool)
    cut = choose_cut(level, sure)
    meta = {"folds": len(np.unique(fold_of)), "rows": len(texts), "max_drop": MAX_DROP, "max_cut": MAX_CUT,
            "out_of_fold_flagged": float((level < cut).mean()),
            "out_of_fold_confident_lost": float((sure & (level < cut)).mean()),
            "out_of_fold_confident": float(sure.mean())}
    return Typicality(final, nq, cq, cut, meta, COMBINE, rank), meta


def read_as(typ: Typicality, tfidf: CharTfidf, texts: list[str], y: np.ndarray, n_classes: int) -> Typicality:
    """`typ` with its rows indexed in `tfidf`'s vocabulary (the served baseline's), its percentiles and cut kept.
    Why: --final fits its baseline on the rows left after --calibration-share and the detector on every row, so
    their vocabularies differed and a served text was read twice, once for each (0.2 ms a read of one text, a
    third of the side work beside the pass; issue 61). Read alike, one read serves both (`reads_like`)."""
    shared = CharTfidf(tfidf.settings, grams(tfidf.vocabulary), tfidf.idf)
    return dataclasses.replace(typ, index=index_rows(shared, texts, y, n_classes))


def save_ood(folder: str | Path, typ: Typicality | None) -> Path | None:
    """folder/ood/: ood.json (vectorizer, vocabulary, percentiles, cut, what k-fold measured) and
    index.safetensors (idf, centroids, postings); with None, removes a stale one."""
    import shutil

    from safetensors.numpy import save_file

    from textdata.tables import atomic_path, write_json

    target = Path(folder) / OOD_DIR
    shutil.rmtree(target, ignore_errors=True)
    if typ is None:
        return None
    ix = typ.index
    target.mkdir(parents=True, exist_ok=True)
    arrays = {"idf": ix.tfidf.idf, "centroids_t": ix.centroids_t, "ptr": ix.ptr, "post_row": ix.post_row,
              "post_val": ix.post_val, "neighbours_q": typ.neighbours_q, "centroid_q": typ.centroid_q}
    spec = {"settings": ix.tfidf.settings, "n_rows": ix.n_rows, "cut": typ.cut, "combine": typ.combine}
    if typ.rank is not None:
        arrays.update(length_q=typ.rank.length_q, product_q=typ.rank.product_q)
        spec["length_median"] = typ.rank.median
    with atomic_path(target / "index.safetensors") as tmp:
        save_file(arrays, str(tmp))
        tmp.chmod(0o644)
    write_json(target / "ood.json", {**spec, "meta": typ.meta, "vocabulary": grams(ix.tfidf.vocabulary)})
    return target


def load_ood(folder: str | Path) -> Typicality | None:
    """The folder's detector, None without ood/; ValueError (one line, naming the folder) when broken."""
    from safetensors.numpy import load_file

    target = Path(folder) / OOD_DIR
    if not target.is_dir():
        return None
    try:
        spec = json.loads((target / "ood.json").read_text(encoding="utf-8"))
        w = load_file(str(target / "index.safetensors"))
        tf = CharTfidf(spec["settings"], spec["vocabulary"], w["idf"])
        n = int(spec["n_rows"])
        ix = Index(tf, w["centroids_t"], w["ptr"], w["post_row"], w["post_val"], n)
        if len(ix.ptr) != len(tf.idf) + 1 or ix.centroids_t.shape[0] != len(tf.idf) or \
                (len(ix.post_row) and int(ix.post_row.max()) >= n) or len(w["neighbours_q"]) != len(LEVELS):
            raise ValueError("the index does not match its vocabulary")
        combine = spec.get("combine", "min")
        if combine not in COMBINES:
            raise ValueError(f"unknown combine {combine!r}")
        return Typicality(ix, w["neighbours_q"], w["centroid_q"], float(spec["cut"]), dict(spec.get("meta") or {}),
                          combine, _load_rank(spec, w) if combine == "centroid*length" else None)
    except Exception as e:  # noqa: BLE001 - json, safetensors and shapes each raise their own types
        msg = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"{target}: unreadable out-of-domain index ({type(e).__name__}: {msg})") from None


def _load_rank(spec: dict, w: dict) -> LengthRank:
    """"centroid*length"'s reference from ood.json and index.safetensors; ValueError naming what is missing."""
    median = spec.get("length_median")
    if not isinstance(median, (int, float)) or isinstance(median, bool) or not np.isfinite(median):
        raise ValueError(f"combine 'centroid*length' needs a number length_median, not {median!r}")
    for k in ("length_q", "product_q"):
        if k not in w or w[k].shape != LEVELS.shape or not np.all(np.diff(w[k]) >= 0):
            raise ValueError(f"combine 'centroid*length' needs {k}: {len(LEVELS)} increasing values")
    return LengthRank(float(median), w["length_q"], w["product_q"])


def carry_ood(model: Path, output: Path) -> None:
    """serving.export: the detector travels with the model; a stale one from an earlier export goes."""
    import shutil

    shutil.rmtree(Path(output) / OOD_DIR, ignore_errors=True)
    if (Path(model) / OOD_DIR / "ood.json").exists():
        shutil.copytree(Path(model) / OOD_DIR, Path(output) / OOD_DIR)
