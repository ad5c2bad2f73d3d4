"""The GPU fast path of fine-tuning, run on CPU: fixed-shape batches and torch.compile give the losses and
weights of the plain loop; the switches are validated."""

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from finetune import train as train_module
from finetune.kfold import parse_args
from finetune.models import load_classifier
from finetune.train import TrainConfig, collate, encode, fit


def toy(tiny_electra_dir, make_toy_rows, n_per_class=8, short=False):
    df = make_toy_rows(n_per_class=n_per_class)
    labels = sorted(df.label.unique())
    y = df.label.map({v: i for i, v in enumerate(labels)}).to_numpy()
    tok = AutoTokenizer.from_pretrained(tiny_electra_dir)
    texts = [t[:6] for t in df.text] if short else df.text.tolist()
    return tok, encode(tok, texts, 64), y, labels


def train(tiny_electra_dir, tok, ids, y, labels, **switches):
    torch.manual_seed(0)
    # No dropout: a padded batch draws a different dropout mask, which is noise, not a difference in the step.
    model = load_classifier("tiny", str(tiny_electra_dir), labels, dropout=0.0)
    # 7 rows per batch: the last batch is short, so fixed shapes must pad rows as well as widths.
    cfg = TrainConfig(epochs=2, batch_size=7, lr=1e-3, layer_decay=0.8, patience=0, class_weights=True, **switches)
    hist = fit(model, tok, ids, y, [], np.array([], dtype=np.int64), cfg, seed=0)
    return hist, model


def test_static_shapes_give_the_plain_losses_and_weights(tiny_electra_dir, toy_rows):
    tok, ids, y, labels = toy(tiny_electra_dir, toy_rows)
    plain, m_plain = train(tiny_electra_dir, tok, ids, y, labels, static_shapes="off")
    fixed, m_fixed = train(tiny_electra_dir, tok, ids, y, labels, static_shapes="on")
    assert len(plain.train_loss) == len(fixed.train_loss) == 2 * int(np.ceil(24 / 7))
    np.testing.assert_allclose(fixed.train_loss, plain.train_loss, rtol=1e-4, atol=1e-5)
    assert plain.train_loss[-1] < plain.train_loss[0]  # it trained: equal losses are not two untouched models
    for (name, a), b in zip(m_plain.state_dict().items(), m_fixed.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-4), name


def test_compiled_step_gives_the_plain_losses(tiny_electra_dir, toy_rows, monkeypatch):
    # aot_eager runs dynamo's capture and AOT autograd (what can break a model) without inductor's C++ build.
    monkeypatch.setattr(train_module, "COMPILE_OPTIONS", {"dynamic": False, "backend": "aot_eager"})
    tok, ids, y, labels = toy(tiny_electra_dir, toy_rows, n_per_class=5, short=True)  # one width bucket: one compile
    from torch._dynamo.utils import counters

    plain, _ = train(tiny_electra_dir, tok, ids, y, labels, static_shapes="on")
    counters.clear()
    compiled, model = train(tiny_electra_dir, tok, ids, y, labels, static_shapes="on", compile="on")
    assert counters["stats"]["unique_graphs"] >= 1  # dynamo really captured the model
    np.testing.assert_allclose(compiled.train_loss, plain.train_loss, rtol=1e-4, atol=1e-5)
    assert not any(k.startswith("_orig_mod") for k in model.state_dict())  # saved checkpoints keep plain keys


def test_collate_pads_to_a_fixed_shape():
    ids = [[2, 5, 3], [2, 5, 6, 7, 3]]
    batch = collate(ids, np.array([1, 0]), pad_id=0, device="cpu", width=16, n_rows=4)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (4, 16)
    assert batch["attention_mask"].sum(1).tolist() == [5, 3, 1, 1]  # padding rows: one token, never all-masked
    assert batch["input_ids"][0, :5].tolist() == [2, 5, 6, 7, 3]


@pytest.mark.parametrize("field, value", [("static_shapes", "yes"), ("compile", "max"), ("precision", "fp8")])
def test_bad_switches_fail(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_cuda_graphs_are_refused_off_cuda(tiny_electra_dir, toy_rows):
    tok, ids, y, labels = toy(tiny_electra_dir, toy_rows, n_per_class=2, short=True)
    model = load_classifier("tiny", str(tiny_electra_dir), labels)
    assert TrainConfig(compile="graphs").compile == "graphs"
    with pytest.raises(ValueError, match="needs a CUDA device, not cpu"):
        fit(model, tok, ids, y, [], np.array([], dtype=np.int64), TrainConfig(epochs=1, compile="graphs"), 0)


def test_cli_passes_the_switches(tmp_path):
    cfg = parse_args(["--model", "m", "--data", "d.csv", "--output", str(tmp_path), "--static-shapes", "off",
                      "--compile", "on"])
    assert (cfg.train.static_shapes, cfg.train.compile) == ("off", "on")
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--data", "d.csv", "--compile", "sometimes"])
