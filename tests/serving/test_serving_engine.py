from __future__ import annotations

import json
import random
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from serving.engine import Classifier, ModelError, Prediction

TEXTS = ["꿈에서 봤다", "오류 발생했다 error", "메모 기록 약속", "오늘 회의", "a", "꿈 " * 40, "에러 " * 300, ""]


@pytest.fixture(scope="module")
def torch_clf(trained_classifier_dir):
    return Classifier.load(trained_classifier_dir, provider="torch")


@pytest.fixture(scope="module")
def onnx_clf(exported_dir):
    return Classifier.load(exported_dir, provider="cpu", quantized=False)


@pytest.fixture(scope="module")
def int8_clf(exported_dir):
    return Classifier.load(exported_dir)


def test_load_picks_backend_and_file(torch_clf, onnx_clf, int8_clf):
    assert torch_clf.info()["backend"] == "torch"
    info = onnx_clf.info()
    assert (info["backend"], info["provider"], info["quantized"]) == ("onnx", "cpu", False)
    assert info["labels"] == ["dream", "error", "memo"] == onnx_clf.labels
    assert info["max_length"] == 128
    assert info["export_report"]["passed"] is True
    # On CPU the INT8 file is the default when the export made one.
    assert int8_clf.info()["quantized"] is True


def test_pass_size_follows_the_device(exported_dir, onnx_clf, monkeypatch):
    from serving import engine

    assert onnx_clf.batch_tokens == engine.CPU_BATCH_TOKENS < engine.GPU_BATCH_TOKENS
    assert Classifier.load(exported_dir, provider="cpu", batch_tokens=64).batch_tokens == 64
    # A size per device is settled once, for the device the runner got (the app passes its own sizes).
    per_device = engine.PassSize(cpu=300, gpu=5000)
    runs_on = Classifier.load(exported_dir, batch_tokens=per_device)
    assert runs_on.batch_tokens == per_device.on(runs_on.info()["provider"])
    with pytest.raises(ValueError, match="batch_tokens must be positive"):
        Classifier.load(exported_dir, provider="cpu", batch_tokens=engine.PassSize(cpu=0))
    # provider="cpu" on a machine with a GPU still gets the CPU pass size.
    monkeypatch.setattr(engine, "cuda_available", lambda: True)
    assert Classifier.load(exported_dir, provider="cpu").batch_tokens == engine.CPU_BATCH_TOKENS


def test_onnx_logits_match_pytorch(torch_clf, onnx_clf):
    ref, got = torch_clf.predict_logits(TEXTS), onnx_clf.predict_logits(TEXTS)
    assert ref.shape == (len(TEXTS), 3)
    assert np.abs(ref - got).max() < 1e-4
    assert np.abs(ref).max() > 0.5  # the trained fixture is far from ties, so agreement below means something


def test_int8_argmax_agrees_with_pytorch(torch_clf, int8_clf, toy_rows):
    texts = toy_rows(n_per_class=30, seed=5)["text"].tolist()
    agree = (torch_clf.predict_logits(texts).argmax(1) == int8_clf.predict_logits(texts).argmax(1)).mean()
    assert agree >= 0.95


def test_order_restored_under_length_sorting(onnx_clf):
    rng = random.Random(0)
    texts = [" ".join(rng.choice(["꿈", "오류", "메모", "회의", "에러", "기록"]) for _ in range(rng.randint(1, 60)))
             for _ in range(50)]
    one_by_one = np.stack([onnx_clf.predict_logits([t])[0] for t in texts])
    # A small token budget forces many batches of different padded widths.
    small = Classifier.load(onnx_clf.folder, provider="cpu", quantized=False, batch_tokens=64)
    np.testing.assert_allclose(small.predict_logits(texts), one_by_one, atol=1e-5)
    preds = small.predict(texts)
    assert [p.label for p in preds] == [onnx_clf.labels[i] for i in one_by_one.argmax(1)]


def test_predict_shapes_and_top_k(onnx_clf):
    preds = onnx_clf.predict(["꿈에서 봤다", "오류 발생"])
    assert all(isinstance(p, Prediction) for p in preds)
    assert list(preds[0].probabilities) == onnx_clf.labels  # all labels, id order
    assert sum(preds[0].probabilities.values()) == pytest.approx(1, abs=1e-5)
    assert preds[0].score == max(preds[0].probabilities.values())
    top = onnx_clf.predict(["꿈에서 봤다"], top_k=2)[0]
    assert len(top.probabilities) == 2
    assert list(top.probabilities.values()) == sorted(top.probabilities.values(), reverse=True)
    assert next(iter(top.probabilities)) == top.label
    assert onnx_clf.predict([]) == []
    with pytest.raises(TypeError):
        onnx_clf.predict("one string")


def test_encode_once_then_predict_encoded_matches_predict(onnx_clf):
    seqs = onnx_clf.encode(TEXTS)
    assert seqs == [onnx_clf.encode([t])[0] for t in TEXTS]  # a batch encodes each text as it would alone
    assert all(len(s) <= onnx_clf.max_length for s in seqs)
    assert seqs[-1] == onnx_clf.encode([""])[0] and len(seqs[-1]) == 2  # [CLS] [SEP] only
    assert onnx_clf.predict_encoded(seqs, top_k=2) == onnx_clf.predict(TEXTS, top_k=2)


def test_long_text_truncated_not_crashing(trained_classifier_dir, exported_dir):
    long_text = "꿈에서 봤다 " * 5000  # far beyond the 128 positions
    for path in (trained_classifier_dir, exported_dir):
        clf = Classifier.load(path, provider="torch" if path == trained_classifier_dir else "auto")
        assert [len(ids) for ids in clf.encode([long_text, "꿈", ""])] == [128, 3, 2]
        assert len(clf.predict([long_text])) == 1
    # A max_length beyond the position table is clamped instead of crashing later.
    assert Classifier.load(exported_dir, max_length=10_000).max_length == 128


def test_head_and_head_tail_policies(exported_dir):
    head = Classifier.load(exported_dir, quantized=False, truncation="head")
    both = Classifier.load(exported_dir, quantized=False, truncation="head+tail")
    start = "꿈 " * 200
    a, b = start + "오류 " * 200, start + "메모 " * 200
    # head keeps only the start, so the different endings cannot matter; head+tail keeps the end.
    np.testing.assert_allclose(head.predict_logits([a]), head.predict_logits([b]), atol=1e-6)
    assert np.abs(both.predict_logits([a]) - both.predict_logits([b])).max() > 1e-3
    assert len(both.encode([a])[0]) == 128


def test_thread_safe(onnx_clf):
    texts = [f"{w} {i}" for i, w in enumerate(["꿈", "오류", "메모", "회의"] * 25)]
    expected = onnx_clf.predict_logits(texts)
    chunks = [texts[i::4] for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(onnx_clf.predict_logits, chunks * 3))
    for i, got in enumerate(results):
        np.testing.assert_allclose(got, expected[i % 4 :: 4], atol=1e-5)


def test_normalization_json_is_applied(exported_dir, tmp_path):
    folder = tmp_path / "kc"
    shutil.copytree(exported_dir, folder)
    (folder / "normalization.json").write_text(json.dumps({"kind": "kc"}))
    clf = Classifier.load(folder, quantized=False)
    np.testing.assert_allclose(clf.predict_logits(["꿈에서 봤다 😀 https://x.y"]), clf.predict_logits(["꿈에서 봤다"]),
                               atol=1e-6)


def test_bad_model_folders(tmp_path, exported_dir, trained_classifier_dir):
    with pytest.raises(ModelError, match="no such model folder"):
        Classifier.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        Classifier.load(tmp_path / "empty")
    (tmp_path / "no-tokenizer").mkdir()
    shutil.copy2(trained_classifier_dir / "config.json", tmp_path / "no-tokenizer")
    with pytest.raises(ModelError, match="cannot read config/tokenizer"):
        Classifier.load(tmp_path / "no-tokenizer")
    no_weights = tmp_path / "no-weights"
    shutil.copytree(trained_classifier_dir, no_weights)
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ModelError, match="model.safetensors"):
        Classifier.load(no_weights)
    with pytest.raises(ModelError, match="no usable execution provider"):
        Classifier.load(exported_dir, provider="cuda")  # CPU-only onnxruntime here
    with pytest.raises(ValueError, match="truncation"):
        Classifier.load(exported_dir, truncation="middle")


@pytest.mark.parametrize("tokenizer_class", ["ElectraTokenizerFast", "PreTrainedTokenizerFast", "BertTokenizerFast"])
def test_ids_and_logits_match_transformers_for_each_tokenizer_class(trained_classifier_dir, tmp_path, tokenizer_class):
    """Encode exactly as training did: the engine's ids and logits against transformers' own tokenizer and
    model on the same texts, for each tokenizer class a user's folder may name (a plain
    PreTrainedTokenizerFast once lost [CLS]/[SEP] in serving)."""
    import torch
    import transformers
    from transformers import AutoTokenizer, ElectraForSequenceClassification

    folder = tmp_path / tokenizer_class
    shutil.copytree(trained_classifier_dir, folder)
    source = AutoTokenizer.from_pretrained(trained_classifier_dir)
    cls = getattr(transformers, tokenizer_class)
    specials = {k: getattr(source, k) for k in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token")}
    for name in ("tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "vocab.txt"):
        (folder / name).unlink(missing_ok=True)
    cls(tokenizer_object=source.backend_tokenizer, model_max_length=source.model_max_length, **specials).save_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert type(tok).__name__ == tokenizer_class
    texts = ["꿈에서 봤다", "오류 발생했다 error", "메모", "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3]
    clf = Classifier.load(folder, provider="torch")
    expected = tok(texts, truncation=True, max_length=clf.max_length)["input_ids"]
    assert clf.encode(texts) == expected
    assert expected[0][0] == tok.cls_token_id and expected[0][-1] == tok.sep_token_id
    model = ElectraForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        ref = model(**tok(texts, padding=True, truncation=True, max_length=clf.max_length, return_tensors="pt")).logits
    np.testing.assert_allclose(clf.predict_logits(texts), ref.numpy(), atol=1e-4)
