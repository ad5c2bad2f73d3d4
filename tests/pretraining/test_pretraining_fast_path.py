"""The GPU fast path of pretraining, run on CPU: the compiled step and device-side statistics give the
losses of the plain eager loop; --compile is validated and may change on --resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pretraining import train as train_module
from pretraining.config import TrainConfig, UsageError, resume_differences
from pretraining.train import compile_model, read_sums, train


def read_log(folder) -> list[dict]:
    return [json.loads(line) for line in (Path(folder) / "log.jsonl").read_text().splitlines()]


def test_compiled_step_gives_the_eager_losses(make_config, tmp_path, monkeypatch):
    # aot_eager runs dynamo's capture and AOT autograd (what can break a model) without inductor's C++ build;
    # inductor itself is what CUDA gets by default.
    monkeypatch.setattr(train_module, "COMPILE_OPTIONS", {**train_module.COMPILE_OPTIONS, "backend": "aot_eager"})
    from torch._dynamo.utils import counters

    common = {"max_steps": 6, "log_every": 2, "save_every": 6}
    eager = train(make_config(output=str(tmp_path / "eager"), compile="off", **common))
    counters.clear()
    fast = train(make_config(output=str(tmp_path / "fast"), compile="on", **common))
    assert counters["stats"]["unique_graphs"] == 1  # the whole step, once: no recompiles, no graph breaks
    assert json.loads((fast / "config.json").read_text())["compiled"] is True
    assert json.loads((eager / "config.json").read_text())["compiled"] is False
    a, b = read_log(eager), read_log(fast)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [2, 4, 6]
    assert a[0]["loss"] != a[-1]["loss"]  # it trained
    for ra, rb in zip(a, b, strict=True):
        for key in ("loss", "mlm_loss", "disc_loss", "disc_acc", "gen_acc", "replaced_rate"):
            assert ra[key] == pytest.approx(rb[key], rel=1e-4, abs=1e-6), (ra["step"], key)


def test_compile_auto_is_off_on_cpu_and_keeps_state_dict_keys(make_model, make_config):
    model, _ = make_model()
    keys = list(model.state_dict())
    assert compile_model(model, make_config(compile="auto"), torch.device("cpu"), lambda: None) is False
    assert compile_model(model, make_config(compile="on"), torch.device("cpu"), lambda: None) is True
    assert list(model.state_dict()) == keys  # checkpoints from compiled runs load into plain models


def test_compile_auto_falls_back_to_eager_when_compiling_fails(make_model, make_config, monkeypatch, capsys):
    """The compiled step is what a CUDA machine runs by default (--compile auto): a compiler that fails there
    must cost a warning, not the run. --compile on means it: the failure is raised."""
    def broken_backend(gm, example_inputs):
        raise RuntimeError("backend exploded")

    monkeypatch.setattr(train_module, "COMPILE_OPTIONS", {**train_module.COMPILE_OPTIONS, "backend": broken_backend})
    model, tok = make_model()
    ids = torch.randint(5, len(tok), (2, 16))
    mask = torch.ones_like(ids)

    def probe():
        model(ids, mask).loss.backward()

    cuda = torch.device("cuda")  # only `auto`'s choice reads the device; nothing is placed on it
    assert compile_model(model, make_config(compile="auto"), cuda, probe) is False
    err = capsys.readouterr().err
    assert "--compile auto: compiling the step failed" in err and "backend exploded" in err
    assert torch.isfinite(model(ids, mask).loss)  # eager again: the broken backend is not called
    with pytest.raises(Exception, match="backend exploded"):
        compile_model(model, make_config(compile="on"), cuda, probe)


def test_read_sums_mixes_checkpoint_floats_and_device_tensors():
    sums = {"loss": 1.5 + torch.tensor(2.0, dtype=torch.float64), "n_tokens": torch.tensor(7, dtype=torch.float64)}
    assert read_sums(sums) == {"loss": 3.5, "n_tokens": 7.0}
    assert read_sums({"loss": 0.25}) == {"loss": 0.25} and read_sums({}) == {}


def test_compile_flag_is_validated_and_resumable(make_config, tmp_path):
    with pytest.raises(UsageError, match="unknown compile 'always'"):
        TrainConfig(corpus=("x",), output="o", compile="always")
    with pytest.raises(UsageError, match="--compile graphs replays CUDA graphs and needs a CUDA device, not cpu"):
        train(make_config(output=str(tmp_path / "graphs"), compile="graphs"))
    assert not (tmp_path / "graphs").exists()  # refused before any work
    before = TrainConfig(corpus=("x",), output="o", compile="on").to_dict()
    assert resume_differences(before, TrainConfig(corpus=("x",), output="o", compile="off")) == []
    # A checkpoint from before --init-from and --text-column existed resumes; a changed setting does not.
    older = {k: v for k, v in before.items() if k not in ("init_from", "text_column")}
    assert resume_differences(older, TrainConfig(corpus=("x",), output="o")) == []
    assert resume_differences(older, TrainConfig(corpus=("x",), output="o", text_column="body")) == [
        "text_column: 'text' -> 'body'"]


def test_compiled_step_follows_the_two_stage_switch(make_config, tmp_path, monkeypatch):
    """--two-stage changes the module half way (generator frozen, embeddings copied): the compiled step must
    retrace rather than keep running the first stage's graph."""
    monkeypatch.setattr(train_module, "COMPILE_OPTIONS", {**train_module.COMPILE_OPTIONS, "backend": "aot_eager"})
    common = {"max_steps": 4, "log_every": 1, "save_every": 4, "two_stage": True, "generator_ratio": 1.0,
              "intermediate_size": 128}
    eager = read_log(train(make_config(output=str(tmp_path / "eager"), compile="off", **common)))
    fast = read_log(train(make_config(output=str(tmp_path / "fast"), compile="on", **common)))
    assert [r["stage"] for r in fast] == ["generator"] * 2 + ["discriminator"] * 2
    for ra, rb in zip(eager, fast, strict=True):
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-4, abs=1e-6), ra["step"]
