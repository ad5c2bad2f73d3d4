"""The ablation runner: one row per objective, resumable, fine-tuning stubbed (kfold has its own tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretraining import ablate
from pretraining.config import UsageError

SHAPE = ("embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
         "max_position_embeddings", "seq_len", "batch_size", "warmup_steps", "dropout")


def pretrain_flags(cfg) -> list[str]:
    """The fixture's tiny config as command-line flags, 2 steps."""
    flags = ["--corpus", *cfg.corpus, "--tokenizer", cfg.tokenizer, "--max-steps", "2", "--log-every", "1"]
    for key in SHAPE:
        flags += ["--" + key.replace("_", "-"), str(getattr(cfg, key))]
    return flags


class FakeFinetune:
    """Scores a folder by a number derived from its path, and records what it was asked to fine-tune."""

    def __init__(self):
        self.calls = []

    def __call__(self, model, output, labeled, group_column, finetune_args, random_init=False):
        assert (Path(model) / "config.json").is_file()  # a real exported discriminator
        self.calls.append((Path(model).parent.name, random_init))
        f1 = 0.1 + 0.01 * len(self.calls)
        return {"macro_f1_mean": f1, "macro_f1_std": 0.01, "accuracy_mean": f1, "accuracy_std": 0.0,
                "baseline": {"macro_f1_mean": 0.5, "macro_f1_std": 0.02}}


def test_one_row_per_objective_then_resume_recomputes_nothing(tmp_path, make_config, capsys):
    argv = ["--labeled", "x.csv", "--output", str(tmp_path / "abl"), "--", *pretrain_flags(make_config())]
    base, args = ablate.parse(argv)
    fake = FakeFinetune()
    table = ablate.run(base, args, finetune=fake)
    assert [r["row"] for r in table] == [*ablate.ROWS, "random-init", "tfidf"]
    assert fake.calls == [(o, False) for o in ablate.ROWS] + [("electra", True)]
    assert all(r["steps"] == 2 and r["cpu_seconds"] > 0 for r in table[:5])
    assert table[0]["last_log"]["disc_acc"] is not None and "gen_acc" in table[4]["last_log"]
    assert "BERT (MLM)" in capsys.readouterr().out and (tmp_path / "abl" / "ablation.png").stat().st_size > 0

    # Killed after three rows: the saved rows and finished pretrainings are reused, the rest computed.
    path = tmp_path / "abl" / "ablation.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "rows": saved["rows"][:3]}))
    calls = []

    def counting_pretrain(cfg):
        calls.append(cfg.objective)
        return ablate.pretrain(cfg)

    fake2 = FakeFinetune()
    again = ablate.run(base, args, pretrain=counting_pretrain, finetune=fake2)
    done = {r["row"] for r in saved["rows"][:3]}
    assert calls == [o for o in ablate.ROWS if o not in done]
    assert [c[0] for c in fake2.calls] == calls + ["electra"]
    assert [r["row"] for r in again] == [r["row"] for r in table]
    # a finished pretraining is not rerun: its timing is read back, not measured again
    for old, new in zip(table[:5], again[:5]):
        assert old["cpu_seconds"] == new["cpu_seconds"]

    with pytest.raises(UsageError, match="other settings"):
        ablate.run(*ablate.parse([*argv[:4], "--finetune-args", "--folds 3", *argv[4:]]), finetune=fake)


def test_table_shows_each_objective_s_own_accuracy():
    rows = [{"row": "electra", "last_log": {"disc_acc": 0.862, "gen_acc": 0.069}},
            {"row": "replace-mlm", "last_log": {"disc_acc": None, "main_mlm_acc": 0.061, "gen_acc": 0.068}},
            {"row": "mlm", "last_log": {"disc_acc": None, "gen_acc": 0.064}},
            {"row": "all-tokens-mlm", "last_log": {"disc_acc": None, "gen_acc": 0.094}}]
    assert [ablate.accuracies(r) for r in rows] == [(0.862, 0.069), (0.061, 0.068), (0.064, None), (None, 0.094)]
    lines = ablate.format_table([{**r, "macro_f1_mean": 0.4, "macro_f1_std": 0.01} for r in rows]).splitlines()
    assert lines[2].split()[-2:] == ["0.061", "0.068"] and lines[3].split()[-1] == "0.064"


def test_shared_vocabulary_reads_a_table_corpus_by_its_text_column(tmp_path, make_korean_lines):
    import pandas as pd

    corpus = tmp_path / "notes.csv"
    pd.DataFrame({"rowid": [f"rowid{i % 3}" for i in range(200)], "text": make_korean_lines(200)}).to_csv(corpus,
                                                                                                       index=False)
    argv = ["--labeled", "x.csv", "--output", str(tmp_path / "abl"), "--objectives", "electra", "--",
            "--corpus", str(corpus), "--vocab-size", "300"]
    base, args = ablate.parse(argv)
    report = {"macro_f1_mean": 0.1, "macro_f1_std": 0.0, "accuracy_mean": 0.1, "accuracy_std": 0.0,
              "baseline": {"macro_f1_mean": 0.5, "macro_f1_std": 0.0}}
    seen = []
    ablate.run(base, args, pretrain=lambda cfg: seen.append(cfg.tokenizer) or {},
               finetune=lambda *a, **k: report)
    vocab = json.loads((tmp_path / "abl" / "tokenizer" / "tokenizer.json").read_text())["model"]["vocab"]
    assert seen == [str(tmp_path / "abl" / "tokenizer")]  # every row gets the one vocabulary
    assert any("가" in t or "나" in t for t in vocab)  # trained on the text column...
    assert not any("rowid" in t for t in vocab)  # ...not on the file's raw lines with the other column
