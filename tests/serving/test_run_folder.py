"""A run folder passed as --model: the model inside it is used with a one-line note, or the error says
which subfolder to pass; never transformers' list of every model type."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from finetune import models
from finetune.models import resolve_model
from serving import export, score
from serving.engine import Classifier, ModelError


def kfold_run(root: Path, classifier: Path | None) -> Path:
    """What finetune/kfold.py writes: its own config.json (no model_type), report.json, folds/, model/."""
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model": "x", "data": "y", "folds": 3}))
    (root / "report.json").write_text("{}")
    (root / "folds").mkdir()
    if classifier is not None:
        shutil.copytree(classifier, root / "model")
    return root


def pretraining_run(root: Path, electra: Path) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"preset": "tiny", "max_steps": 10}))
    shutil.copytree(electra, root / "discriminator")
    return root


def test_score_uses_model_in_a_kfold_run(tiny_classifier_dir, tmp_path, capsys):
    run = kfold_run(tmp_path / "ko-help", tiny_classifier_dir)
    pd.DataFrame({"text": ["회의 메모", "꿈에서"]}).to_csv(tmp_path / "in.csv", index=False)
    rc = score.main(["--model", str(run), "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "out.csv"),
                     "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert f"note: --model {run} is a k-fold run" in err and str(run / "model") in err
    assert len(pd.read_csv(tmp_path / "out.csv")) == 2
    assert Classifier.load(run).folder == run / "model"  # the app and the UI load through here


@pytest.mark.parametrize("kind", ["pretraining", "discriminator", "placeholder-labels", "kfold-without-model",
                                  "other"])
def test_serving_says_which_folder_to_pass(kind, tiny_electra_dir, tiny_classifier_dir, tmp_path, capsys):
    if kind == "pretraining":
        run, want = pretraining_run(tmp_path / "pretrain", tiny_electra_dir), "Fine-tune it first"
    elif kind == "discriminator":  # the run's discriminator/ itself: transformers would add a random head
        run, want = tmp_path / "discriminator", "ElectraForPreTraining, a pretrained encoder with no trained"
        shutil.copytree(tiny_electra_dir, run)
    elif kind == "placeholder-labels":
        run, want = tmp_path / "hub-model", "never fine-tuned on named labels"
        shutil.copytree(tiny_classifier_dir, run)
        conf = json.loads((run / "config.json").read_text())
        conf["id2label"] = {str(i): f"LABEL_{i}" for i in range(3)}
        (run / "config.json").write_text(json.dumps(conf))
    elif kind == "kfold-without-model":
        run, want = kfold_run(tmp_path / "cv", None), "--resume --final"
    else:
        run, want = tmp_path / "other", "no model_type"
        run.mkdir()
        (run / "config.json").write_text("{}")
    pd.DataFrame({"text": ["a"]}).to_csv(tmp_path / "in.csv", index=False)
    assert score.main(["--model", str(run), "--input", str(tmp_path / "in.csv"),
                       "--output", str(tmp_path / "o.csv")]) == 2
    assert export.main(["--model", str(run), "--output", str(tmp_path / "onnx")]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") and want in line for line in lines), err
    assert "albert" not in err and len(err) < 1000  # not transformers' list of model types
    with pytest.raises(ModelError, match=want):
        Classifier.load(run)


def test_export_uses_model_in_a_kfold_run(tiny_classifier_dir, tmp_path, capsys, monkeypatch):
    run = kfold_run(tmp_path / "ko-help", tiny_classifier_dir)
    loaded = []

    def stop(path, **kw):
        loaded.append(Path(path))
        raise ModelError("stopped after the folder was chosen")

    monkeypatch.setattr(export.Classifier, "load", stop)
    assert export.main(["--model", str(run), "--output", str(tmp_path / "onnx")]) == 2
    assert loaded == [run / "model"]
    assert f"note: --model {run} is a k-fold run" in capsys.readouterr().err


def test_kfold_takes_a_pretraining_run(tiny_electra_dir, tiny_classifier_dir, tmp_path, capsys):
    run = pretraining_run(tmp_path / "pretrain", tiny_electra_dir)
    assert resolve_model(str(run)) == str(run / "discriminator")
    assert "is a pretraining run (pretraining/train.py); using" in capsys.readouterr().err
    cv = kfold_run(tmp_path / "cv", tiny_classifier_dir)
    assert resolve_model(str(cv)) == str(cv / "model")
    assert resolve_model(str(tiny_electra_dir)) == str(tiny_electra_dir)  # a model folder as it is
    with pytest.raises(models.ModelError, match="--resume --final"):
        resolve_model(str(kfold_run(tmp_path / "empty", None)))


def test_kfold_on_a_folder_that_is_no_model_says_so_without_the_hub(tmp_path):
    from finetune.models import load_tokenizer

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "readme.txt").write_text("not a model")
    with pytest.raises(models.ModelError) as e:
        load_tokenizer(str(folder), resolve_model(str(folder)), 64)
    assert f"could not load the folder {folder}" in str(e.value) and "Hub" not in str(e.value)
