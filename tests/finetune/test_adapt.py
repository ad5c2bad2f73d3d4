"""Task-adaptive pretraining inside k-fold: what each fold's adapter reads, and the adapter itself."""

from __future__ import annotations

import pandas as pd
import torch
from safetensors.torch import load_file

from finetune import kfold
from finetune.adapt import AdaptConfig, adapt


def test_each_fold_adapts_on_its_training_texts_only(tmp_path, toy_csv, tiny_electra_dir, monkeypatch):
    df = pd.read_csv(toy_csv)
    df["text"] = [f"{t} {i}" for i, t in enumerate(df["text"])]  # unique texts, so membership is exact
    data = tmp_path / "notes.csv"
    df.to_csv(data, index=False)
    given = {}

    def fake_adapt(model_dir, texts, folder, cfg, seed):
        given[int(folder.name.removeprefix("adapt_"))] = list(texts)
        assert cfg.steps == 3
        return model_dir

    monkeypatch.setattr(kfold, "adapt", fake_adapt)
    out = tmp_path / "run"
    assert kfold.main(["--model", str(tiny_electra_dir), "--data", str(data), "--folds", "3", "--epochs", "1",
                       "--group-column", "page", "--adapt-steps", "3", "--output", str(out)]) == 0
    oof = pd.read_csv(out / "oof_predictions.csv")
    assert sorted(given) == [0, 1, 2]
    for k, texts in given.items():
        held_out = set(oof.loc[oof["fold"] == k, "text"])
        training = set(oof.loc[oof["fold"] != k, "text"])
        assert held_out and not held_out & set(texts)
        assert set(texts) == training


def test_adapt_continues_rtd_and_reuses_a_finished_run(tmp_path, tiny_electra_dir):
    texts = [f"오늘 회의 시간 약속 메모 기록 {i}" for i in range(40)]
    cfg = AdaptConfig(steps=2, batch_size=2, seq_len=32)
    folder = adapt(str(tiny_electra_dir), texts, tmp_path / "a", cfg, seed=0)
    assert (tmp_path / "a" / "train_texts.txt").read_text(encoding="utf-8").splitlines() == texts
    before, after = load_file(tiny_electra_dir / "model.safetensors"), load_file(folder / "model.safetensors")
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert adapt(str(tiny_electra_dir), texts, tmp_path / "a", cfg, seed=0) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
