"""`python -m bench e5_cost --fold N -- KFOLD_FLAGS`: one fold of k-fold through kfold's own parser and run_fold,
the model and the baseline scored on the same split, on the tiny model."""

from __future__ import annotations

import json

import pytest

from bench import e5_cost


def test_one_fold_is_the_fold_a_full_run_fixes(tmp_path, tiny_electra_dir, toy_rows, capsys):
    data = tmp_path / "notes.csv"
    toy_rows(n_per_class=8).to_csv(data, index=False)
    out, run = tmp_path / "one.json", tmp_path / "run"
    assert e5_cost.main(["--fold", "1", "--output", str(out), "--", "--model", str(tiny_electra_dir), "--data",
                         str(data), "--folds", "3", "--group-column", "page", "--epochs", "1",
                         "--output", str(run)]) == 0
    got = json.loads(out.read_text())
    folds = json.loads((run / "fold_ids.json").read_text())  # the folds the full run would train
    assert got["fold"] == 1 and got["folds"] == 3 and got["record"]["n_val"] == len(folds["val_rows"][1])
    assert 0 <= got["record"]["macro_f1"] <= 1 and "macro_f1" in got["record"]["baseline"] and got["history"]
    assert got["unknown_tokens"]["token"] == "[UNK]" and got["unknown_tokens"]["of_texts"] == 24
    assert "char TF-IDF + LR" in capsys.readouterr().out
    assert not (run / "folds" / "fold_0.json").exists()  # only the asked fold ran


def test_a_fold_past_the_run_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="folds 0..4"):
        e5_cost.main(["--fold", "5", "--", "--model", "minilm", "--data", "bbcnews", "--output", str(tmp_path / "r")])
