"""The baseline every report shows beside the model: char n-gram TF-IDF + logistic regression.

Char n-grams because they need no tokenizer and work on Korean, where word TF-IDF splits on
spaces that Korean uses inconsistently.
"""

from __future__ import annotations

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline


def tfidf_logreg(seed: int):
    return make_pipeline(
        TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), min_df=2, sublinear_tf=True, max_features=200_000),
        LogisticRegression(C=10.0, max_iter=2000, random_state=seed),
    )


def baseline_predict(texts: list[str], y: np.ndarray, train: np.ndarray, val: np.ndarray, seed: int) -> np.ndarray:
    """Class probabilities for `val` from a baseline fit on `train` (columns = all label ids)."""
    model = tfidf_logreg(seed).fit([texts[i] for i in train], y[train])
    proba = np.zeros((len(val), int(y.max()) + 1))
    proba[:, model.classes_] = model.predict_proba([texts[i] for i in val])
    return proba
