"""The training loop: schedule, resume reproducing the uninterrupted run, CLI end to end, bad inputs."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pretraining.config import TrainConfig, UsageError
from pretraining.train import lr_at, main, train

ROOT = Path(__file__).resolve().parents[2]


def read_log(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def test_lr_warms_up_then_decays_to_zero():
    cfg = TrainConfig(corpus=("x",), output="o", lr=1e-3, warmup_steps=10, max_steps=110)
    lrs = [lr_at(s, cfg) for s in range(111)]
    assert lrs[9] == pytest.approx(1e-3)
    assert all(a < b for a, b in itertools.pairwise(lrs[:10]))
    assert all(a > b for a, b in itertools.pairwise(lrs[10:111]))
    assert lrs[110] == 0.0


@pytest.mark.parametrize("two_stage, stop_after", [(False, 6), (True, 5)])
def test_resume_after_stop_reproduces_the_uninterrupted_run(make_config, tmp_path, two_stage, stop_after):
    common = {"max_steps": 8, "log_every": 4, "save_every": 4, "two_stage": two_stage}
    straight = train(make_config(output=str(tmp_path / "straight"), **common))
    # Stop between two log steps, so the resumed run must also restore the partial log sums; with
    # --two-stage, after the switch at step 4, so the resumed model must be rebuilt in its second stage.
    stopped = make_config(output=str(tmp_path / "stopped"), stop_after=stop_after, **common)
    train(stopped)
    assert not (Path(stopped.output) / "discriminator").exists()
    assert [r["step"] for r in read_log(Path(stopped.output))] == [4]
    train(make_config(output=stopped.output, resume=True, **common))

    a, b = read_log(straight), read_log(Path(stopped.output))
    assert [r["step"] for r in a] == [r["step"] for r in b] == [4, 8]
    for key in ("loss", "mlm_loss", "disc_loss", "disc_acc", "gen_acc", "replaced_rate"):
        assert a[1].get(key) == pytest.approx(b[1].get(key), rel=1e-5, abs=1e-6), key
    from safetensors.torch import load_file

    wa = load_file(straight / "discriminator" / "model.safetensors")
    wb = load_file(Path(stopped.output) / "discriminator" / "model.safetensors")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_resume_refuses_a_changed_config(make_config, tmp_path):
    train(make_config(output=str(tmp_path / "r"), max_steps=4, stop_after=2))
    with pytest.raises(UsageError, match="lr"):
        train(make_config(output=str(tmp_path / "r"), max_steps=4, lr=5e-3, resume=True))
    with pytest.raises(UsageError, match="already holds a run"):
        train(make_config(output=str(tmp_path / "r"), max_steps=4))


def test_config_rejects_unknown_keys():
    with pytest.raises(UsageError, match="unknown config keys: hiden_size"):
        TrainConfig.from_dict({"corpus": ["x"], "output": "o", "hiden_size": 3})


def run_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "pretraining/train.py", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


def test_cli_end_to_end_without_a_tokenizer(ko_corpus, tmp_path):
    from transformers import AutoModelForSequenceClassification, ElectraForMaskedLM, ElectraForPreTraining

    out = tmp_path / "cli"
    result = run_cli("--corpus", ko_corpus, "--preset", "tiny", "--vocab-size", 300, "--output", out,
                     "--max-steps", 6, "--batch-size", 4, "--seq-len", 32, "--embedding-size", 16,
                     "--hidden-size", 32, "--intermediate-size", 64, "--log-every", 3, "--seed", 7)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (out / "tokenizer" / "tokenizer.json").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["seed"] == 7 and config["hidden_size"] == 32 and config["preset"] == "tiny"
    records = read_log(out)
    assert [r["step"] for r in records] == [3, 6]
    for key in ("loss", "mlm_loss", "disc_loss", "gen_acc", "disc_acc", "disc_precision", "disc_recall",
                "replaced_rate", "tokens_per_s", "lr"):
        assert key in records[-1], key
    assert (out / "rtd_accuracy.png").stat().st_size > 1000
    ElectraForPreTraining.from_pretrained(out / "discriminator")
    ElectraForMaskedLM.from_pretrained(out / "generator")
    AutoModelForSequenceClassification.from_pretrained(out / "discriminator", num_labels=2)


@pytest.fixture
def no_mask_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "가", "나"])}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece(vocab, unk_token="[UNK]")),
                                  pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")
    tok.save_pretrained(tmp_path / "no-mask-tok")
    return tmp_path / "no-mask-tok"


@pytest.mark.parametrize("case, message", [
    ("missing", "corpus file not found"),
    ("empty", "corpus file is empty"),
    ("too_small", "fewer than one batch"),
    ("no_mask", "lacks [MASK]"),
    ("preset", "unknown preset 'huge'"),
])
def test_bad_inputs_give_their_message(case, message, ko_corpus, tiny_tokenizer_dir, no_mask_tokenizer, tmp_path,
                                       capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n")
    short = tmp_path / "short.txt"
    short.write_text("오늘 회의\n")
    corpus, tokenizer, extra = ko_corpus, tiny_tokenizer_dir, ["--preset", "tiny"]
    if case == "missing":
        corpus = tmp_path / "nope.txt"
    elif case == "empty":
        corpus = empty
    elif case == "too_small":
        corpus = short
    elif case == "no_mask":
        tokenizer = no_mask_tokenizer
    else:
        extra = ["--preset", "huge"]
    code = main(["--corpus", str(corpus), "--tokenizer", str(tokenizer), "--output", str(tmp_path / "o"),
                 "--batch-size", "4", "--seq-len", "32", "--max-steps", "1", *extra])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
