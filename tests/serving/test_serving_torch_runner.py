"""The GPU fast path of the PyTorch backend, run on CPU: bucketed static shapes, reduced precision with its
fp32 parity check, `auto` choosing PyTorch on a CUDA machine without onnxruntime-gpu, flag validation."""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest

from serving import engine
from serving.engine import Classifier
from serving.torch_runner import TorchRunner, bucket_grid

TEXTS = ["꿈에서 봤다", "오류 발생했다 error", "메모 기록 약속", "a", "꿈 " * 40, "에러 " * 300, ""]


def test_bucket_grid_covers_every_batch_the_engine_forms():
    grid = bucket_grid(max_length=128, batch_tokens=8192)
    assert list(grid) == [16, 32, 48, 64, 96, 128]
    for width, rows in grid.items():
        cap = 8192 // width
        assert rows[0] == 1 and rows[-1] == cap and all(r <= cap for r in rows)
    assert list(bucket_grid(max_length=40, batch_tokens=64)) == [16, 32, 40]


def test_bucketed_static_shapes_give_the_plain_logits(trained_classifier_dir):
    plain = Classifier.load(trained_classifier_dir, provider="torch", batch_tokens=256)
    bucketed = Classifier.load(trained_classifier_dir, provider="torch", batch_tokens=256)
    bucketed._run = TorchRunner(trained_classifier_dir, None, max_length=128, batch_tokens=256, device="cpu",
                                buckets=True)
    rng = random.Random(1)
    texts = TEXTS + [" ".join(rng.choice(["꿈", "오류", "메모", "회의"]) for _ in range(rng.randint(1, 50)))
                     for _ in range(40)]
    calls = []
    real_call = TorchRunner.__call__

    def spy(self, feeds):
        calls.append(feeds["input_ids"].shape)
        return real_call(self, feeds)

    TorchRunner.__call__ = spy
    try:
        got = bucketed.predict_logits(texts)
    finally:
        TorchRunner.__call__ = real_call
    # Every pass had a bucket width, and rows were padded up inside the runner: the grid was really used.
    assert calls and all(width in bucketed._run.grid for _, width in calls)
    assert any(n not in bucketed._run.grid[width] for n, width in calls)
    assert np.abs(plain.predict_logits(texts) - got).max() < 1e-4


def test_bf16_is_checked_against_fp32_and_reported(trained_classifier_dir, toy_rows):
    texts = toy_rows(n_per_class=20, seed=7)["text"].tolist()
    fp32 = Classifier.load(trained_classifier_dir, provider="torch")
    bf16 = Classifier.load(trained_classifier_dir, provider="torch", precision="bf16", parity_texts=texts)
    info = bf16.info()
    assert info["precision"] == "bfloat16" and fp32.info()["precision"] == "float32"
    check = info["precision_check"]
    assert check["probe_rows"] == len(texts) and check["passed"] is True
    assert check["argmax_agreement"] >= 0.995 and 0 < check["max_abs_logit_diff"] < 0.5
    ref, got = fp32.predict_logits(texts), bf16.predict_logits(texts)
    assert 0 < np.abs(ref - got).max() < 0.5  # really bf16 (not equal), still close
    assert (ref.argmax(1) == got.argmax(1)).mean() >= 0.95


def test_low_agreement_keeps_fp32(trained_classifier_dir, monkeypatch):
    monkeypatch.setattr("serving.torch_runner.MIN_AGREEMENT", 1.01)  # no dtype can pass
    clf = Classifier.load(trained_classifier_dir, provider="torch", precision="bf16")
    assert clf.info()["precision"] == "float32"
    assert clf.info()["precision_check"]["passed"] is False


@pytest.mark.parametrize("kwargs, message", [
    ({"precision": "int4"}, "precision 'int4'"),
    ({"precision": "fp16"}, "fp16 needs CUDA"),
    ({"cuda_graphs": True}, "needs a CUDA device"),
])
def test_bad_options_fail_clearly(trained_classifier_dir, kwargs, message):
    with pytest.raises(ValueError, match=message):
        Classifier.load(trained_classifier_dir, provider="torch", **kwargs)


def test_auto_on_cuda_without_onnxruntime_gpu_serves_pytorch(exported_dir, monkeypatch, caplog):
    monkeypatch.setattr(engine, "_gpu_without_ort_gpu", lambda: True)
    with caplog.at_level(logging.WARNING, logger="serving.engine"):
        clf = Classifier.load(exported_dir)
    assert clf.info()["backend"] == "torch"
    assert [r for r in caplog.records if "onnxruntime-gpu" in r.getMessage()]
    # An explicit provider is still honoured.
    assert Classifier.load(exported_dir, provider="cpu").info()["backend"] == "onnx"
    onnx = Classifier.load(exported_dir, provider="cpu", quantized=False)
    assert np.abs(onnx.predict_logits(TEXTS) - clf.predict_logits(TEXTS)).max() < 1e-4


def test_a_failed_graph_capture_falls_back_to_eager(trained_classifier_dir, monkeypatch):
    import torch

    runner = TorchRunner(trained_classifier_dir, None, max_length=128, batch_tokens=256, device="cpu", buckets=True)
    plain = TorchRunner(trained_classifier_dir, None, max_length=128, batch_tokens=256, device="cpu")

    def refuse(self, rows, width):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(TorchRunner, "_capture", refuse)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    runner._capture_all()
    assert runner.graph_error == "operation not permitted when stream is capturing"
    assert runner.grid is None and not runner._graphs
    feeds = {"input_ids": np.array([[2, 7, 9, 3]]), "attention_mask": np.ones((1, 4), np.int64)}
    assert runner.width(4) == 4  # exact shapes again
    np.testing.assert_allclose(runner(feeds), plain(feeds), atol=1e-6)
