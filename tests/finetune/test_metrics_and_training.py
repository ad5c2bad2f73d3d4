"""Metrics match a hand computation; the schedule, LLRD and batching do what their docstrings say."""

import itertools

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from finetune.metrics import fold_metrics, summarize
from finetune.models import load_classifier, resolve_model
from finetune.train import (
    TrainConfig,
    encode,
    fit,
    layer_lr_groups,
    length_grouped_batches,
    lr_at,
    predict_proba,
)
from textdata.labels import LabelSpace


def test_fold_metrics_match_hand_computation():
    y_true = np.array([0, 0, 1, 1, 2, 2])
    y_pred = np.array([0, 1, 1, 1, 2, 0])
    m = fold_metrics(y_true, y_pred, ["a", "b", "c"])
    # per class F1: a 1/2, b 4/5 (p 2/3, r 1), c 2/3 (p 1, r 1/2)
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert m["weighted_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)  # equal supports
    assert m["per_class"]["b"] == {"precision": pytest.approx(2 / 3), "recall": 1.0, "f1": pytest.approx(0.8),
                                   "support": 2}
    assert m["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]


def test_summary_is_mean_and_std():
    s = summarize([{"accuracy": 0.5, "macro_f1": 0.4, "weighted_f1": 0.6}, {"accuracy": 0.7, "macro_f1": 0.6,
                                                                              "weighted_f1": 0.8}])
    assert s["macro_f1_mean"] == pytest.approx(0.5) and s["macro_f1_std"] == pytest.approx(0.1)


def test_lr_warms_up_then_decays_to_zero():
    lrs = [lr_at(s, total_steps=100, peak=1.0, warmup_steps=10) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a < b for a, b in itertools.pairwise(lrs[:10]))
    assert all(a > b for a, b in itertools.pairwise(lrs[10:]))
    assert lrs[99] == pytest.approx(1 / 90)


def test_layer_decay_scales_by_distance_from_head(tiny_electra_dir):
    model = load_classifier("tiny", str(tiny_electra_dir), ["a", "b"])
    groups = layer_lr_groups(model, layer_decay=0.5, weight_decay=0.01)
    scale = {}
    for g in groups:
        for p in g["params"]:
            scale[id(p)] = (g["lr_scale"], g["weight_decay"])
    named = dict(model.named_parameters())
    assert scale[id(named["classifier.out_proj.weight"])] == (1.0, 0.01)
    assert scale[id(named["electra.encoder.layer.1.attention.self.query.weight"])][0] == 0.5  # top layer: one step
    assert scale[id(named["electra.encoder.layer.0.output.dense.weight"])][0] == 0.25
    assert scale[id(named["electra.embeddings.word_embeddings.weight"])][0] == 0.125
    assert scale[id(named["electra.encoder.layer.0.output.LayerNorm.weight"])][1] == 0.0  # no decay on norms
    assert sum(len(g["params"]) for g in groups) == len(named)


def test_length_grouped_batches_cover_all_rows_and_cut_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 200, size=1000)
    batches = length_grouped_batches(lengths, 16, np.random.default_rng(1), mega=20)
    assert sorted(np.concatenate(batches)) == list(range(1000))
    padded = sum(len(b) * lengths[b].max() for b in batches)
    random_batches = np.array_split(rng.permutation(1000), 1000 // 16)
    padded_random = sum(len(b) * lengths[b].max() for b in random_batches)
    assert padded < 0.7 * padded_random


def test_predict_proba_restores_input_order(tiny_classifier_dir):
    tok = AutoTokenizer.from_pretrained(tiny_classifier_dir)
    model = load_classifier("tiny", str(tiny_classifier_dir), ["dream", "error", "memo"])
    texts = ["꿈", "오늘 회의 시간 약속 메모 기록 " * 5, "에러", "어제 꿈에서 봤다 " * 3]
    ids = encode(tok, texts, 64)
    batched = predict_proba(model, ids, tok.pad_token_id, torch.device("cpu"), batch_tokens=40)
    one_by_one = np.concatenate([predict_proba(model, [x], tok.pad_token_id, torch.device("cpu")) for x in ids])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)


def test_fit_learns_the_toy_task(tiny_electra_dir, toy_rows):
    df = toy_rows(n_per_class=20)
    labels = sorted(df.label.unique())
    y = df.label.map({v: i for i, v in enumerate(labels)}).to_numpy()
    tok = AutoTokenizer.from_pretrained(tiny_electra_dir)
    ids = encode(tok, df.text.tolist(), 64)
    model = load_classifier("tiny", str(tiny_electra_dir), labels)
    hist = fit(model, tok, ids, y, [], np.array([], dtype=np.int64),
               TrainConfig(epochs=15, batch_size=8, lr=1e-3, layer_decay=1.0, patience=0), seed=0)
    acc = (predict_proba(model, ids, tok.pad_token_id, torch.device("cpu")).argmax(1) == y).mean()
    assert np.mean(hist.train_loss[-10:]) < np.mean(hist.train_loss[:10]) - 0.1
    assert acc > 0.55  # chance is 1/3


def test_aliases_resolve_and_unknown_paths_fail():
    assert resolve_model("kcelectra") == "beomi/KcELECTRA-base-v2022"
    assert resolve_model("KoELECTRA") == "monologg/koelectra-base-v3-discriminator"
    with pytest.raises(ValueError, match="no such folder"):
        resolve_model("./not/here")


def test_multi_label_epoch_choice_follows_the_inner_loss_not_f1_at_half(tiny_electra_dir, toy_rows, monkeypatch):
    """Rare labels keep every sigmoid under 0.5 for epochs: F1 at 0.5 is 0 each epoch, and ranking epochs by
    it kept epoch 1 (and the final model's epoch count at 1). The inner BCE ranks them instead."""
    from finetune import train

    df = toy_rows(n_per_class=4)
    tok = AutoTokenizer.from_pretrained(tiny_electra_dir)
    ids = encode(tok, df.text.tolist(), 32)
    model = load_classifier("tiny", str(tiny_electra_dir), LabelSpace.of(["a", "b", "c"], multi_label=True))
    rng = np.random.default_rng(0)
    y = (rng.random((len(ids), 3)) < 0.1).astype(np.int64)
    val_ids, y_val = ids[:6], y[:6].copy()
    y_val[0, 0] = 1
    # epoch 3 is the one closest to the truth, and still under 0.5 everywhere
    scripted = [np.full(y_val.shape, 0.3), np.full(y_val.shape, 0.2), 0.05 + 0.4 * y_val, np.full(y_val.shape, 0.25)]
    calls = iter(scripted)
    monkeypatch.setattr(train, "predict_proba", lambda *a, **k: next(calls).astype(np.float32))
    hist = fit(model, tok, ids, y, val_ids, y_val,
               TrainConfig(epochs=4, batch_size=8, lr=1e-3, layer_decay=1.0, patience=0), seed=0)
    assert hist.val_macro_f1 == [0.0, 0.0, 0.0, 0.0]
    assert hist.best_epoch == 3 == int(np.argmin(hist.val_loss)) + 1


def test_multi_label_head_starts_at_the_label_priors(tiny_electra_dir, toy_rows):
    """A fresh multi-label head answers each label's prevalence, not 0.5 (ELECTRA's head: dense, out_proj)."""
    from finetune.train import start_at_label_priors

    df = toy_rows(n_per_class=10)
    tok = AutoTokenizer.from_pretrained(tiny_electra_dir)
    ids = encode(tok, df.text.tolist(), 32)
    model = load_classifier("tiny", str(tiny_electra_dir), LabelSpace.of(["a", "b", "c"], multi_label=True))
    y = (np.random.default_rng(1).random((len(ids), 3)) < [0.05, 0.3, 0.6]).astype(np.int64)
    before = predict_proba(model, ids, tok.pad_token_id, torch.device("cpu")).mean(0)
    start_at_label_priors(model, y)
    after = predict_proba(model, ids, tok.pad_token_id, torch.device("cpu")).mean(0)
    prior = (y.sum(0) + 1) / (len(y) + 2)
    np.testing.assert_allclose(after, prior, atol=0.05)
    assert np.abs(before - prior).max() > 0.15  # a head at bias 0 answers about 0.5 for every label
    # fit() does it for a multi-label model: its first epoch starts from the priors, not from 0.5
    model = load_classifier("tiny", str(tiny_electra_dir), LabelSpace.of(["a", "b", "c"], multi_label=True))
    fit(model, tok, ids, y, [], np.zeros((0, 3), np.int64), TrainConfig(epochs=1, batch_size=8, lr=1e-9, patience=0),
        seed=0)
    np.testing.assert_allclose(predict_proba(model, ids, tok.pad_token_id, torch.device("cpu")).mean(0), prior,
                               atol=0.05)
