"""bench/teacher.py's options for ko-help (issue 47): whole pages unseen, k-fold's baseline as the student."""

from __future__ import annotations

import numpy as np
import pytest

from bench import teacher


@pytest.fixture
def restore():
    yield
    teacher.use("bbcnews")


def toy(n_pages: int = 60, per_page: int = 5):
    """Pages of one class each (as ko-help's), 3 classes, texts with a class word and a page word."""
    rng = np.random.default_rng(0)
    page_class = np.arange(n_pages) % 3
    pages = np.repeat([f"p{i}" for i in range(n_pages)], per_page)
    y = np.repeat(page_class, per_page)
    words = ["alpha", "beta", "gamma"]
    texts = [f"{words[c]} page{p} {' '.join(rng.choice(list('abcdefgh'), 4))} {i}"
             for i, (c, p) in enumerate(zip(y, pages))]
    return texts, y, pages


def test_grouped_split_keeps_whole_pages_unseen(restore):
    _, y, pages = toy()
    teacher.use("ko-help", groups=pages)
    gold, rest, test = teacher.split(y, 0)
    assert not set(pages[test]) & set(pages[np.concatenate([gold, rest])])  # no page on both sides
    assert 0.3 < len(test) / len(y) < 0.5
    assert sorted(np.bincount(y[gold]).tolist()) == [teacher.GOLD_PER_CLASS] * 3
    assert set(y[test]) == {0, 1, 2}
    teacher.use("ko-help")  # without groups pages are split (what flatters every student alike)
    gold, rest, test = teacher.split(y, 0)
    assert set(pages[test]) & set(pages[np.concatenate([gold, rest])])


def test_the_simulated_teacher_is_the_same_whatever_the_student(restore):
    texts, y, _ = toy()
    teacher.use("ko-help")
    X = teacher.features(texts)
    sgd = teacher.reference_margins(X, y, 3)
    teacher.use("ko-help", student="baseline")
    assert type(teacher.model(0)).__name__ == "LogisticRegression"
    baseline = teacher.reference_margins(X, y, 3)
    np.testing.assert_array_equal(sgd[0], baseline[0])
    np.testing.assert_array_equal(sgd[1], baseline[1])
    assert teacher.student_features(texts, X).shape[1] != X.shape[1]  # the baseline's own char 1-4 vocabulary
