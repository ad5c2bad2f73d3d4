"""The pass plan (serving/passes.py): where a batch is cut, what a pass is measured to cost, and the engine running
exactly the passes it planned, once per call."""

from __future__ import annotations

import numpy as np
import pytest

from serving import passes
from serving.engine import Classifier

NAMES = ["l100", "s10", "m30", "s11", "m32", "s12", "l90"]
LENGTHS = [100, 10, 30, 11, 32, 12, 90]


def named(plan) -> list[list[str]]:
    return [[NAMES[i] for i in p] for p in plan]


def test_plan_cuts_where_padding_costs_more_than_a_pass():
    # 90 -> 100 pads one text by 10 tokens (< 12: same pass); 32 -> 90 would pad two by 58 each.
    assert named(passes.plan(LENGTHS, 512, overhead=12)) == [["s12", "s11", "s10"], ["m32", "m30"], ["l100", "l90"]]
    # a cheap pass: tighter passes
    assert named(passes.plan(LENGTHS, 512, overhead=4)) == [["s12", "s11", "s10"], ["m32", "m30"], ["l90"], ["l100"]]
    # A costly pass (eager PyTorch) takes everything the pass size allows in one go.
    assert named(passes.plan(LENGTHS, 512, overhead=1000)) == [["m32", "m30", "s12", "s11", "s10"], ["l100", "l90"]]


def test_plan_keeps_every_row_once_within_the_pass_size_and_the_backends_rows():
    lengths = np.random.default_rng(0).integers(2, 128, size=300)
    plan = passes.plan(lengths, 1024, overhead=40, max_batch=16)
    assert sorted(np.concatenate(plan).tolist()) == list(range(300))
    for p in plan:
        assert len(p) <= 16 and len(p) * lengths[p].max() <= 1024
        assert list(lengths[p]) == sorted(lengths[p], reverse=True)  # padded longest first
    assert [len(p) for p in passes.plan([100] * 6, 300, overhead=12)] == [3, 3]  # the pass size cuts too
    assert [len(p) for p in passes.plan([400, 5], 300, overhead=1000)] == [1, 1]  # a text over it: a pass alone
    # ties keep input order, so a plan does not depend on the sort's mood
    assert passes.plan([7, 7, 7], 512, overhead=12)[0].tolist() == [0, 1, 2]


def test_plan_counts_the_width_the_backend_pads_to():
    # CUDA graph buckets of 16/64: 10 and 12 share a bucket, 20 is already in the 64 one, so 20 and 60 cost the same
    bucket = lambda n: 16 if n <= 16 else 64
    plan = passes.plan([10, 12, 20, 60], 4096, overhead=50, width=bucket)
    assert [sorted(p.tolist()) for p in plan] == [[0, 1], [2, 3]]


def test_measure_overhead_recovers_the_fixed_cost_of_a_pass(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(passes.time, "perf_counter", lambda: clock[0])

    def run_pass(seqs):  # 20 ms per pass plus 0.1 ms per padded token, on a fake clock
        clock[0] += 0.020 + 0.0001 * len(seqs) * max(map(len, seqs))

    assert passes.measure_overhead(run_pass, list(range(128))) == pytest.approx(200)


def test_the_engine_runs_the_passes_it_planned_once(exported_dir):
    clf = Classifier.load(exported_dir, provider="cpu", quantized=False)
    shapes = []

    class Recording:  # the runner, with each pass's shape noted
        def __getattr__(self, name):
            return getattr(run, name)

        def __call__(self, feeds):
            shapes.append(feeds["input_ids"].shape)
            return run(feeds)

    run = clf._run

    clf.call_overhead_tokens = 4  # fixed: the plan below must not follow this machine's timing
    texts = ["꿈", "오류 " * 3, "메모 " * 40, "꿈에서 봤다", "회의 " * 50, "오류"]
    seqs = clf.encode(texts)
    expected = clf.predict_logits(texts)
    clf._run = Recording()
    preds = clf.predict_encoded(seqs)
    plan = clf.plan(seqs)
    assert len(plan) > 1 and shapes == [(len(p), max(len(seqs[i]) for i in p)) for p in plan]
    np.testing.assert_allclose(clf._logits(seqs), expected, atol=1e-5)
    assert [p.label for p in preds] == [clf.labels[int(k)] for k in expected.argmax(1)]


def test_the_pass_cost_is_measured_once_and_only_when_a_plan_needs_it(exported_dir):
    clf = Classifier.load(exported_dir, provider="cpu", quantized=False)
    assert clf._overhead is None  # loading (its warm-up included) plans nothing
    clf.predict_encoded(clf.encode(["한 문장"]))  # one text: one pass, nothing to plan
    # calls on texts (the UI, batch scoring, the export's gate) cut at the pass size only: never follow the timing
    clf.predict(["꿈", "오류 " * 30, "메모"])
    clf.predict_proba(["꿈", "오류 " * 30, "메모"])
    clf.predict_logits(["꿈", "오류 " * 30])
    assert clf._overhead is None
    first = clf.call_overhead_tokens
    assert 0 <= first <= passes.MAX_OVERHEAD_TOKENS and clf.call_overhead_tokens == first
