"""bench/teacher.py's simulated LLM: wrong where a reader would be, never answering one class, the same answer
for the same text."""

from __future__ import annotations

import numpy as np
import pytest

from bench import teacher


@pytest.fixture
def restore():
    yield
    teacher.use("bbcnews")


def toy(n: int = 300):
    rng = np.random.default_rng(0)
    y = np.arange(n) % 3
    words = ["alpha", "beta", "gamma"]
    texts = [f"{words[c]} {' '.join(rng.choice(list('abcdefgh'), 4))} {i}" for i, c in enumerate(y)]
    return texts, y, ["sdraw", "simpress", "swriter"]


def test_the_teacher_errs_on_the_hardest_texts_and_never_answers_its_class(restore):
    texts, y, labels = toy()
    teacher.use("ko-help")  # never answers sdraw, answered as simpress
    X = teacher.features(texts)
    margin, confusable = teacher.reference_margins(X, y, 3)
    answer = teacher.simulated_teacher(texts, y, labels, margin, confusable, 0.5)
    assert not (answer == 0).any() and (answer[y == 0] == 1).all()
    assert 0.5 <= (answer == y).mean() < 0.55  # an error sent to the neighbour may land on the truth
    wrong = (answer != y) & (y != 0)
    assert margin[wrong].mean() < margin[(answer == y)].mean()  # the errors fall on the hard texts
    np.testing.assert_array_equal(answer, teacher.simulated_teacher(texts, y, labels, margin, confusable, 0.5))
