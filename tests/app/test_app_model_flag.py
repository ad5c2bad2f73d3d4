"""What `python -m app --model FOLDER` serves (issue 31): FOLDER, registered or found registered and activated,
never an earlier active version instead; a folder with no trained classification head is refused before it
becomes a version. And champion/challenger compares versions only on evaluation-slice rows neither trained on
(app/versions/lineage.py): an imported v1 that trained on the slice is not judged on those rows."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil

import pandas as pd
import pytest

from app.__main__ import model_to_serve
from app.config import Config, parse_args
from app.versions.jobs import Jobs
from app.versions.lineage import TEXTS_FILE, shared_rows, text_hash
from app.versions.registry import Registry
from textdata.errors import ModelError


def config(folder, models) -> Config:
    return parse_args(["--model", str(folder), "--models-dir", str(models), "--no-ui"])


def test_the_folder_given_is_what_serves(spread_model_dir, tmp_path, caplog):
    reg = Registry(tmp_path / "models")
    other = tmp_path / "other"
    shutil.copytree(spread_model_dir, other)
    (other / "note.txt").write_text("another model")
    with caplog.at_level(logging.INFO, logger="app"):
        assert model_to_serve(config(spread_model_dir, reg.root), reg)[0] == "v1"
        assert model_to_serve(config(other, reg.root), reg)[0] == "v2"
        assert reg.active() == "v2"
        version, clf = model_to_serve(config(spread_model_dir, reg.root), reg)  # registered before, not active
    assert version == "v1" and reg.active() == "v1" and clf.labels == ["dream", "error", "memo"]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("serving ")]
    assert said[-1] == f"serving {spread_model_dir} as v1 (registered before; activated instead of v2)"
    assert said[0] == f"serving {spread_model_dir} as v1 (registered now; activated)"
    assert reg.names() == ["v1", "v2"]


def test_a_promoted_retrain_of_the_folder_keeps_serving(spread_model_dir, tmp_path, caplog):
    """A container restarts with the same --model: the version the app retrained from it and promoted stays."""
    reg = Registry(tmp_path / "models")
    model_to_serve(config(spread_model_dir, reg.root), reg)
    stage = reg.staging("job")
    shutil.copytree(spread_model_dir, stage, dirs_exist_ok=True)
    (stage / "note.txt").write_text("retrained")
    reg.set_active(reg.commit(stage, {"source": "trained", "parent": "v1"}))  # v2, promoted
    caplog.clear()  # the first start's line, kept when an earlier test left the app's log level at INFO
    with caplog.at_level(logging.INFO, logger="app"):
        assert model_to_serve(config(spread_model_dir, reg.root), reg)[0] == "v2"
    assert reg.active() == "v2"
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("serving ")]
    assert said == [(f"serving v2: retrained from {spread_model_dir} (v1) and promoted; "
                     "`python -m app models activate v1` serves v1 itself")]
    other = tmp_path / "other"  # an imported folder is no retrain of v1: --model v1's folder replaces it
    shutil.copytree(spread_model_dir, other)
    (other / "note.txt").write_text("another model")
    assert model_to_serve(config(other, reg.root), reg)[0] == "v3"
    assert model_to_serve(config(spread_model_dir, reg.root), reg)[0] == "v1" and reg.active() == "v1"


@pytest.mark.parametrize("kind", ["discriminator", "placeholder labels"])
def test_a_folder_without_a_trained_head_is_refused(kind, spread_model_dir, tiny_electra_dir, tmp_path):
    reg = Registry(tmp_path / "models")
    model_to_serve(config(spread_model_dir, reg.root), reg)
    folder = tmp_path / kind
    if kind == "discriminator":  # pretraining/'s output: ElectraForPreTraining
        shutil.copytree(tiny_electra_dir, folder)
        want = "discriminator: ElectraForPreTraining, a pretrained encoder with no trained classification head"
    else:  # a classifier whose labels transformers named: never fine-tuned on labels
        shutil.copytree(spread_model_dir, folder)
        conf = json.loads((folder / "config.json").read_text())
        conf["id2label"] = {str(i): f"LABEL_{i}" for i in range(3)}
        conf["label2id"] = {f"LABEL_{i}": i for i in range(3)}
        (folder / "config.json").write_text(json.dumps(conf))
        want = "has no label names (id2label: LABEL_0, LABEL_1, LABEL_2)"
    with pytest.raises(ModelError, match="fine-tune it first") as e:
        model_to_serve(config(folder, reg.root), reg)
    assert want in str(e.value) and "python finetune/kfold.py --model" in str(e.value)
    assert reg.names() == ["v1"] and reg.active() == "v1"  # no version made, the active one untouched


def kfold_model(spread_model_dir, tmp_path, rows: pd.DataFrame, held: pd.DataFrame):
    """A folder like `finetune/kfold.py --data train.csv --holdout 0.2 --final` writes (model/ with its
    training_config.json naming the data and the run's holdout.csv)."""
    run = tmp_path / "run"
    run.mkdir()
    data = tmp_path / "train.csv"
    pd.concat([rows, held]).to_csv(data, index=False)
    held.to_csv(run / "holdout.csv", index=False)
    model = tmp_path / "model"
    shutil.copytree(spread_model_dir, model)
    (model / "training_config.json").write_text(json.dumps(
        {"config": {"data": str(data), "text_column": "text", "holdout": 0.2, "output": str(run)}}))
    return model


def texts(prefix: str, n: int) -> pd.DataFrame:
    return pd.DataFrame({"text": [f"{prefix} 메모 {i}" for i in range(n)], "label": ["memo"] * n})


def test_an_imported_version_is_never_judged_on_rows_it_trained_on(spread_model_dir, tmp_path):
    trained, held, fresh = texts("trained", 30), texts("held", 8), texts("fresh", 5)
    reg = Registry(tmp_path / "models")
    v1, _ = reg.register_folder(kfold_model(spread_model_dir, tmp_path, trained, held))
    meta = reg.meta(v1)["trained_on"]
    assert meta["known"] and meta["rows"] == 38 and meta["holdout_rows"] == 8 and meta["texts"] == 30
    assert len((reg.path(v1) / TEXTS_FILE).read_text().split()) == 30
    challenger = tmp_path / "challenger"  # trained by the app: its table never holds slice rows
    (challenger / "training").mkdir(parents=True)
    texts("app", 20).to_csv(challenger / "training" / "train.csv", index=False)

    # the slice: 12 rows v1 trained on (whitespace differs: still the same text), its holdout rows, new ones
    slice_rows = pd.concat([trained.iloc[:12].assign(text=lambda d: d["text"] + "  "), held, fresh])
    rows, basis = shared_rows(slice_rows.reset_index(drop=True), {"the new version": challenger,
                                                                    v1: reg.path(v1)})
    assert basis == {"rows": 13, "slice_rows": 25, "left_out": {v1: 12}, "unknown": {}}
    assert set(rows["text"]) == set(held["text"]) | set(fresh["text"])
    assert not set(map(text_hash, rows["text"])) & set((reg.path(v1) / TEXTS_FILE).read_text().split())


def test_the_decision_says_what_it_rests_on(spread_model_dir, tmp_path):
    reg = Registry(tmp_path / "models")
    gone = kfold_model(spread_model_dir, tmp_path, texts("t", 5), texts("h", 2))
    (tmp_path / "train.csv").unlink()  # its training data is gone: what it trained on is unknown
    v1, _ = reg.register_folder(gone)
    assert reg.meta(v1)["trained_on"]["known"] is False

    class Switcher:
        async def activate(self, version, why):
            pass

    jobs = Jobs(Config(promote="auto", promote_tolerance=0.01, data_dir=tmp_path), reg, Switcher())
    basis = {"rows": 249, "slice_rows": 1236, "left_out": {v1: 987},
             "unknown": {}}
    lost = asyncio.run(jobs._decide("v2", {"eval": {"macro_f1": 0.5}, "champion_eval": {"macro_f1": 0.7},
                                           "compared_on": basis}, v1))
    assert lost["promoted"] is False
    assert "below v1's 0.7000 on 249 of 1236 evaluation-slice rows (left out, trained on: v1 987)" in lost["why"]
    _, basis = shared_rows(texts("x", 4), {v1: reg.path(v1)})
    assert basis["rows"] == 4 and "not there" in basis["unknown"][v1]
    won = asyncio.run(jobs._decide("v3", {"eval": {"macro_f1": 0.9}, "champion_eval": {"macro_f1": 0.7},
                                          "compared_on": basis}, v1))
    assert won["promoted"] and "on 4 of 4 evaluation-slice rows; v1 may have trained on some of them" in won["why"]
    none = {"rows": 0, "slice_rows": 3, "left_out": {v1: 3}, "unknown": {}}
    skipped = asyncio.run(jobs._decide("v4", {"eval": None, "champion_eval": None, "compared_on": none}, v1))
    assert not skipped["promoted"] and "evaluation texts were trained on" in skipped["why"]
    assert "promote it by hand" in skipped["why"]  # the decision in plain words, with what to do (issue 45)
