"""finetune.kfold.run(cfg, on_progress=...): every training step of every fold and of the final model is
reported as a dict, and each finished fold once (the app's training child reads these, not progress bars)."""

from __future__ import annotations

from finetune.config import config_from_json


def test_run_reports_each_step_of_each_fold_and_the_final_model(tmp_path, tiny_electra_dir, toy_rows):
    from finetune import kfold

    data = tmp_path / "notes.csv"
    toy_rows(n_per_class=8, seed=5).to_csv(data, index=False)
    cfg = config_from_json({"model": str(tiny_electra_dir), "data": str(data), "output": str(tmp_path / "run"),
                            "folds": 2, "final": True, "blend": "off",
                            "train": {"epochs": 2, "batch_size": 8, "patience": 0}})
    events = []
    report = kfold.run(cfg, on_progress=events.append)
    for fold in (1, 2):
        steps = [e for e in events if e["stage"] == "fold" and e["fold"] == fold]
        assert [e["step"] for e in steps] == list(range(1, steps[0]["steps"] + 1))
        assert {e["folds"] for e in steps} == {2} and [e["epoch"] for e in steps][-1] == 2
    assert [e["done"] for e in events if e["stage"] == "fold done"] == [1, 2]
    final = [e for e in events if e["stage"] == "final"]
    assert final and final[-1]["step"] == final[-1]["steps"] and final[-1]["epoch"] == report["final_model"]["epochs"]
    last_fold = max(i for i, e in enumerate(events) if e["stage"] == "fold done")
    assert all(e["stage"] == "final" for e in events[last_fold + 1:])
