from __future__ import annotations

import numpy as np

from serving.parity import SAMPLE_TEXTS, builtin_sample, compare, verdict


def test_builtin_sample_is_seeded_varied_and_starts_with_the_edge_cases():
    a, b = builtin_sample(300), builtin_sample(300)
    assert a == b and len(a) == 300 and a[: len(SAMPLE_TEXTS)] == SAMPLE_TEXTS
    assert builtin_sample(300, seed=1) != a
    lengths = [len(t.split()) for t in a]
    assert min(lengths) == 1 and max(lengths) > 100  # single words up to past any max_length
    assert len(set(a)) > 250


def test_verdict_judges_agreement_and_f1_drop_in_points():
    ref = np.array([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [0.0, 2.0]])
    got = ref.copy()
    got[3] = [2.0, 0.0]  # one flip out of four
    y = ["a", "b", "a", "b"]
    stats = compare(ref, got, ["a", "b"], y)
    assert stats["argmax_agreement"] == 0.75 and stats["max_abs_logit_diff"] == 2.0
    ref_f1 = compare(ref, ref, ["a", "b"], y)["macro_f1"]
    why = verdict(stats, ref_f1, min_agreement=0.7, max_f1_drop=0.5)
    assert len(why) == 1 and why[0].startswith("macro-F1 -26.67 points")
    assert stats["macro_f1_change_points"] < -26
    assert verdict(stats, ref_f1, min_agreement=0.8, max_f1_drop=30)[0].startswith("argmax agreement 0.7500")
    assert verdict(stats, None, min_agreement=0.75, max_f1_drop=0) == []  # no labels: agreement only


def test_tokenization_mismatch_names_the_first_text(trained_classifier_dir):
    """The export gate compares the engine's ids with transformers' (the engine against itself cannot)."""
    from serving.engine import Classifier
    from serving.parity import tokenization_mismatch

    clf = Classifier.load(trained_classifier_dir, provider="torch")
    texts = ["꿈에서 봤다", "메모 기록"]
    assert tokenization_mismatch(trained_classifier_dir, clf, texts) is None
    clf._prefix = []  # what serving did for a plain PreTrainedTokenizerFast: no [CLS]
    assert "'꿈에서 봤다'" in tokenization_mismatch(trained_classifier_dir, clf, texts)
