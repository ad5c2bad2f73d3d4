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


# ---------------------------------------------------------------- the gate on what users see (issue 44)
def _softmax(z):
    z = np.exp(z - z.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


def _served(ref_logits, y=None, labels=("a", "b", "c"), confident_score=0.9):
    from serving.parity import ServedReference

    probs = _softmax(ref_logits)
    idx = None if y is None else np.array([labels.index(v) for v in y])
    return ServedReference(_softmax, probs, probs.max(1) >= confident_score, f"served score >= {confident_score}",
                           list(labels), idx)


def _judge(ref_logits, got_logits, y, **limits):
    from serving.parity import served_stats

    labels = ["a", "b", "c"]
    stats = compare(ref_logits, got_logits, labels, y)
    stats["served"] = served_stats(_served(ref_logits, y), got_logits, limits.pop("near_tie_margin", 0.1))
    ref_f1 = compare(ref_logits, ref_logits, labels, y)["macro_f1"]
    old = verdict({k: v for k, v in stats.items() if k != "served"}, ref_f1, 0.99, 0.5)  # the gate before issue 44
    return stats, verdict(stats, ref_f1, 0.99, 0.5, limits.pop("max_ece_rise", 1.0)), old


def _confident_rows(n):
    """n rows fp32 answers at ~0.995 (labels a, b, c in turn), each right."""
    logits = np.zeros((n, 3))
    logits[np.arange(n), np.arange(n) % 3] = 6.0
    return logits, ["abc"[i % 3] for i in range(n)]


def test_near_tie_flips_fail_plain_agreement_but_pass_the_served_gate():
    conf, y = _confident_rows(96)
    # four near-ties (0.51 vs 0.49) that INT8 flips, two right -> wrong and two wrong -> right: the same F1 and ECE
    ties = np.array([[1.0, 0.96, -5], [0.96, 1.0, -5], [1.0, 0.96, -5], [0.96, 1.0, -5]])
    ref = np.vstack([conf, ties])
    got = np.vstack([conf, ties[:, [1, 0, 2]]])
    stats, why, old = _judge(ref, got, y + ["a", "b", "b", "a"])
    assert stats["argmax_agreement"] == 0.96 and old == ["argmax agreement 0.9600 < 0.99"]
    s = stats["served"]
    assert why == [], why
    assert (s["confident_rows"], s["confident_agreement"], s["beyond_near_tie_agreement"]) == (96, 1.0, 1.0)
    assert (s["near_tie_rows"], s["changed_in_near_ties"], s["changed_beyond_near_ties"]) == (4, 4, 0)
    assert s["largest_changed_margin"] < 0.1 and abs(s["macro_f1_change_points"]) < 1e-9
    assert abs(s["ece_change_points"]) < 0.5 and s["agreement"] == 0.96


def test_a_changed_confident_answer_fails_the_served_gate_though_plain_agreement_passes():
    conf, y = _confident_rows(20)
    # 0.67 / 0.24 for a, b, c in turn: decided, not confident, each right
    mid = np.array([np.roll([1.0, 0.0, -1.0], i % 3) for i in range(980)])
    ref = np.vstack([conf, mid])
    got = ref.copy()
    got[[0, 1]] = got[[0, 1]][:, [1, 2, 0]]  # two confident answers move to another label
    stats, why, old = _judge(ref, got, y + ["abc"[i % 3] for i in range(980)])
    assert stats["argmax_agreement"] == 0.998 and old == []  # the old gate let it through
    s = stats["served"]
    assert (s["confident_rows"], s["confident_agreement"]) == (20, 0.9) and s["beyond_near_tie_agreement"] == 0.998
    assert len(why) == 1 and why[0].startswith("agreement on the 20 answers fp32 is confident of (served score >= 0.9) "
                                               "0.9000 < 0.99")


def test_changed_answers_beyond_near_ties_and_worse_calibration_fail():
    mid = np.tile([[1.0, 0.0, -1.0]], (100, 1))
    got = mid.copy()
    got[:2] = [[0.0, 1.0, -1.0]]  # two decided answers (gap 0.42) change: not noise
    stats, why, _ = _judge(mid, got, ["a"] * 100)
    assert stats["served"]["confident_rows"] == 0 and stats["served"]["confident_agreement"] is None
    assert stats["served"]["changed_beyond_near_ties"] == 2
    assert any(w.startswith("agreement beyond near-ties (fp32's top two scores more than 0.1 apart) 0.9800 < 0.99")
               for w in why)
    # The same labels, all scores pushed towards 1: argmax agreement 1.0, but the scores users see lie more.
    y = ["a"] * 70 + ["b"] * 30
    stats, why, old = _judge(mid, mid * 4, y)
    assert stats["argmax_agreement"] == 1.0 and old == []
    assert stats["served"]["ece_change_points"] > 1 and len(why) == 1 and why[0].startswith("ECE +")
    assert _judge(mid, mid * 4, y, max_ece_rise=100)[1] == []


def test_served_reference_goes_through_the_engines_own_scores(trained_classifier_dir):
    from serving.engine import Classifier
    from serving.parity import ServedReference, served_stats

    clf = Classifier.load(trained_classifier_dir, provider="torch")
    texts = ["꿈에서 봤다", "메모 기록", "error 500 when saving", "로그인 오류"]
    logits = clf.predict_logits(texts)
    ref = ServedReference.of(clf, texts, logits, ["dream", "memo", "error", "nope"], confident_score=0.5)
    assert np.allclose(ref.probs, clf.predict_proba(texts), atol=1e-6)
    assert ref.confident_rule == "served score >= 0.5" and ref.y[-1] == -1  # a label the model does not know
    s = served_stats(ref, logits, 0.1)
    assert s["agreement"] == 1.0 and s["macro_f1_change_points"] == 0 and s["ece_change_points"] == 0
