"""The out-of-domain typicality in an encoder's embedding space (issue 42: "distance in the encoder's or the TF-IDF
space to the training rows"), on bench/ood_cuts.py's saved resplits beside the served TF-IDF gate: the candidates
below join bench/ood_scores.py's, which scores them out of fold (fold k's rows against a fit on the other folds'
rows, as k-fold fits the detector), turns them into out-of-fold percentiles, combines them with the served
typicality and applies the served cut rule (baseline/ood.py choose_cut). `length_both*` there is the served gate
("centroid*length", equal level and cut: tests/bench/test_ood_scores.py), measured in the same run.

    python bench/ood_cuts.py --data bbc-first-sentences --resplits 10 --saved DIR ...   # first: the resplits
    python bench/ood_encoder.py --run bbc-first-sentences:0.9:DIR --candidates length_both,minilm_centroid,minilm_knn \\
        --combos length_both*,minilm_knn,minilm_knn+length_both* --output OUT.json

The embedding is the off-the-shelf MiniLM-L6 (the `minilm` alias's weights, not fine-tuned): the mean of the last
hidden state over the text's tokens, l2-normalised (how the sentence-transformers model was trained to be read).
  minilm_centroid  the largest cosine to a class's mean embedding (l2-normalised)
  minilm_knn       the mean cosine to the NEIGHBOURS nearest training rows
  minilm_maha      minus the smallest Mahalanobis distance to a class mean (tied covariance, ridge 1e-3 of its
                   mean variance: 384 dimensions on ~1,000 rows)
`tuned_centroid` / `tuned_knn` / `tuned_maha`: the same scores on the pooled output of a MiniLM fine-tuned on the
rows each is fitted on (`finetuned`: six fine-tunings a resplit, about a minute each on a free core).
The confident masks are bench/ood_cuts.py's (TF-IDF + logistic regression), not a MiniLM classifier's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from baseline.ood import NEIGHBOURS
from bench.ood_scores import CANDIDATES
from bench.ood_scores import main as scores_main

MAX_LENGTH = 128  # tokens; BBC first sentences and package synopses fit, long ko-help rows are cut
BATCH = 64


def cached(vectors):
    """texts -> unit rows of `vectors` (a batch of texts -> their raw vectors), each distinct text computed once
    (the resplits share their texts, so 10 resplits cost one pass over the data set and the off-topic rows)."""
    cache = {}

    def embed(texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in cache]
        for a in range(0, len(todo), BATCH):
            v = vectors(todo[a:a + BATCH])
            cache.update(zip(todo[a:a + BATCH], v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)))
        return np.stack([cache[t] for t in texts]) if texts else np.zeros((0, 1))
    return embed


def minilm_embed(model: str = "minilm"):
    """texts -> (n, 384) unit rows: the mean of the last hidden state over the tokens (the model loaded on first
    use, so that importing the candidates costs nothing)."""
    held = {}

    def vectors(part: list[str]) -> np.ndarray:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from finetune.models import resolve_model

        if not held:
            path = resolve_model(model)
            held.update(tok=AutoTokenizer.from_pretrained(path), enc=AutoModel.from_pretrained(path).eval())
        batch = held["tok"](part, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
        with torch.inference_mode():
            h = held["enc"](**batch).last_hidden_state
        m = batch["attention_mask"].unsqueeze(-1).to(h.dtype)
        return ((h * m).sum(1) / m.sum(1).clamp(min=1)).numpy()
    return cached(vectors)


def embedded(embed, how: str):
    """A bench/ood_scores.py candidate in `embed`'s space: "centroid", "knn" or "maha" (module docstring)."""
    def cand(texts, y, nc):
        X, y = embed(list(texts)), np.asarray(y)
        if how == "knn":
            k = min(NEIGHBOURS, len(X))
            return lambda t: np.sort(embed(list(t)) @ X.T, 1)[:, -k:].mean(1)
        mu = np.stack([X[y == c].mean(0) if (y == c).any() else np.zeros(X.shape[1]) for c in range(nc)])
        if how == "centroid":
            C = mu / np.maximum(np.linalg.norm(mu, axis=1, keepdims=True), 1e-12)
            return lambda t: (embed(list(t)) @ C.T).max(1)
        S = np.cov((X - mu[y]).T)
        P = np.linalg.inv(S + 1e-3 * np.eye(len(S)) * np.trace(S) / len(S))

        def maha(t):
            Z = embed(list(t))
            return -np.stack([np.einsum("ij,jk,ik->i", Z - m, P, Z - m) for m in mu], 1).min(1)
        return maha
    return cand


def finetuned(how: str, model: str = "minilm", epochs: int = 3, max_length: int = 64, keep: int = 6):
    """A candidate in the space of a classifier fine-tuned on the rows it is fitted on (issue 42's served
    encoder, as encoder_transfer.py's k-fold trains it: 3 epochs, 64 tokens, the trainer's defaults, a tenth of the
    rows for its inner validation): the pooled output its classification head reads, l2-normalised. Fold k's rows
    are scored by a model fine-tuned on the other folds', as the detector's index is; the models are shared by
    the three scores (the last `keep` training sets)."""
    def cand(texts, y, nc):
        key = hash((tuple(texts), tuple(np.asarray(y).tolist())))
        if key not in _TUNED:
            while len(_TUNED) >= keep:
                _TUNED.pop(next(iter(_TUNED)))
            _TUNED[key] = _fine_tune(list(texts), np.asarray(y), nc, model, epochs, max_length)
        return embedded(_TUNED[key], how)(texts, y, nc)
    return cand


_TUNED: dict = {}


def _fine_tune(texts, y, nc, model, epochs, max_length):
    import time

    import torch

    from finetune.models import load_classifier, load_tokenizer, resolve_model
    from finetune.train import encode, fit
    from finetune.train_config import TrainConfig

    t0 = time.time()
    resolved = resolve_model(model)
    tok = load_tokenizer(model, resolved, max_length)
    clf = load_classifier(model, resolved, [str(c) for c in range(nc)])
    ids = encode(tok, texts, max_length)
    val = np.random.default_rng(0).random(len(ids)) < 0.1
    tr, va = np.flatnonzero(~val), np.flatnonzero(val)
    fit(clf, tok, [ids[i] for i in tr], y[tr], [ids[i] for i in va], y[va], TrainConfig(epochs=epochs), seed=0)
    clf.eval()
    print(f"  fine-tuned on {len(texts)} rows in {time.time() - t0:.0f} s", flush=True)

    def vectors(part: list[str]) -> np.ndarray:
        enc = tok(part, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.inference_mode():
            out = clf.base_model(**enc)
        pooled = getattr(out, "pooler_output", None)  # BERT's head reads the pooler; ELECTRA's the first token
        return (pooled if pooled is not None else out.last_hidden_state[:, 0]).numpy()
    return cached(vectors)


_minilm = minilm_embed()
CANDIDATES.update({f"minilm_{how}": embedded(_minilm, how) for how in ("centroid", "knn", "maha")})
CANDIDATES.update({f"tuned_{how}": finetuned(how) for how in ("centroid", "knn", "maha")})

if __name__ == "__main__":
    sys.exit(scores_main())
