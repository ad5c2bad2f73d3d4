"""pretraining/ keeps its own copies of shared rules so that it imports no other package; each pair agrees.

A copy is marked by a comment line right above it, `# Twin of <module>.<name>: tests/textdata/test_twins.py`;
test_every_marked_twin_is_checked_here holds each mark to a test below that uses both sides."""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch

from pretraining.config import Parser as PretrainParser
from pretraining.config import TrainConfig, build_parser, exits_2_on_usage_error
from pretraining.config import UsageError as PretrainUsageError
from pretraining.config import flag_hint as pretrain_flag_hint
from pretraining.cpu_limits import CpuLimits as PretrainCpuLimits
from pretraining.cpu_limits import plan_threads as pretrain_plan_threads
from pretraining.e5 import RECIPE as PRETRAIN_RECIPE
from pretraining.train import autocast_dtype
from pretraining.train import lr_at as pretrain_lr_at
from textdata.cpu_limits import CpuLimits, plan_threads
from textdata.errors import UsageError, UserError, exits_2_on_user_error
from textdata.flags import Parser, add_flags, flag_hint
from textdata.model_files import RECIPE
from textdata.numerics import PRECISIONS, lr_at, resolve_dtype

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"^# Twin of ([\w.]+)")


@pytest.mark.parametrize(("max_steps", "warmup_steps", "lr"), [(100, 10, 1e-3), (7, 1, 5e-4), (1000, 0, 2e-4)])
def test_lr_schedules_agree(max_steps, warmup_steps, lr):
    cfg = replace(TrainConfig(), max_steps=max_steps, warmup_steps=max(warmup_steps, 1), lr=lr)
    for step in range(max_steps + 2):
        assert pretrain_lr_at(step, cfg) == lr_at(step, max_steps, lr, cfg.warmup_steps)


def test_precision_rules_agree_on_this_device():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for precision in PRECISIONS:
        cfg = replace(TrainConfig(), precision=precision)
        try:
            expected = resolve_dtype(precision, device.type)
        except UsageError:
            with pytest.raises(PretrainUsageError, match="fp16 needs CUDA"):
                autocast_dtype(cfg, device)
            continue
        assert autocast_dtype(cfg, device) == expected


def test_exit_wrappers_agree(capsys):
    """A user error is one line on stderr and exit 2; a clean run passes its status through; a bug keeps its
    traceback."""
    outcomes = []
    for wrap, error in ((exits_2_on_user_error, UserError), (exits_2_on_usage_error, PretrainUsageError)):
        def fails(error=error):
            raise error("--max-steps must be positive")

        def bug():
            raise RuntimeError("a bug")

        status = wrap(fails)()
        outcomes.append((status, capsys.readouterr().err, wrap(lambda: 0)()))
        with pytest.raises(RuntimeError, match="a bug"):
            wrap(bug)()
    assert outcomes[0] == outcomes[1] == (2, "error: --max-steps must be positive\n", 0)


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings
            if action.dest != "help"}


def test_flag_builders_agree():
    """pretraining's build_parser gives every TrainConfig field the flag, the parsed value and the shown default
    that textdata.flags.add_flags gives it (corpus and output are required there, and presets add their values)."""
    ours = build_parser("pretrain")
    shared = argparse.ArgumentParser()
    add_flags(shared, TrainConfig, skip=("corpus", "output"))
    assert set(_options(ours)) - {"--corpus", "--output"} == set(_options(shared))
    assert len(_options(shared)) == len(fields(TrainConfig)) - 2
    for option, action in _options(shared).items():
        shown = re.search(r"\(default: [^)]*\)", action.help).group(0)[:-1]
        assert shown in _options(ours)[option].help, option
    given = ["--preset", "tiny", "--hidden-size", "64", "--two-stage", "--lr", "0.002", "--tokenizer", "tok",
             "--stop-after", "5", "--objective", "mlm"]
    ours_args = vars(ours.parse_args(["--corpus", "c.txt", "--output", "out", *given]))
    shared_args = vars(shared.parse_args(given))
    for dest in ("preset", "hidden_size", "two_stage", "lr", "tokenizer", "stop_after", "objective"):
        assert ours_args[dest] == shared_args[dest], dest


@pytest.mark.parametrize("argv", [["--fold", "2"], ["--epoch=3", "--lrr", "1"], ["--zzz"], ["--max-step", "4"]])
def test_a_typo_d_flag_is_one_line_naming_the_closest_on_both_sides(argv, capsys):
    """Issue 45: a mistyped flag printed 24 lines of usage, then "unrecognized arguments"."""
    said = []
    for parser_class, hint in ((Parser, flag_hint), (PretrainParser, pretrain_flag_hint)):
        p = parser_class(prog="cli", allow_abbrev=False)
        for flag in ("--folds", "--epochs", "--lr", "--max-steps"):
            p.add_argument(flag)
        with pytest.raises(SystemExit) as e:
            p.parse_args(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and "usage" not in err
        said.append(err)
        assert hint("unrecognized arguments: --fold 2", ["--folds"]) == "unknown flag --fold: did you mean --folds?"
    assert said[0] == said[1]
    if argv[0] == "--fold":
        assert said[0] == "cli: error: unknown flag --fold: did you mean --folds? (--help lists every flag)\n"
    if argv[0] == "--zzz":
        assert "did you mean" not in said[0]
    if argv[0].startswith("--epoch="):
        assert "--epoch=3: did you mean --epochs?" in said[0] and "--lrr: did you mean --lr?" in said[0]


def _marks() -> list[tuple[str, str]]:
    """(pretraining's qualified name, its twin's) for every `# Twin of` line right above a def or class."""
    found = []
    for path in sorted((ROOT / "pretraining").glob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        module = "pretraining." + path.stem
        for node in ast.parse("\n".join(lines)).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.lineno >= 2:
                mark = MARK.match(lines[node.lineno - 2])
                if mark:
                    found.append((f"{module}.{node.name}", mark.group(1)))
    return found


def _resolve(qualified: str):
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_recipe_file_has_one_name():
    """pretraining writes the recipe that finetune reads: a rename on one side would drop it silently."""
    assert PRETRAIN_RECIPE == RECIPE


def test_every_marked_twin_is_checked_here():
    """Each mark names an object that exists, and some test in this file uses both it and the copy."""
    marks = _marks()
    assert {copy.rsplit(".", 1)[1] for copy, _ in marks} >= {
        "UsageError", "exits_2_on_usage_error", "build_parser", "lr_at", "autocast_dtype"}
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    imported = {alias.asname or alias.name: f"{node.module}.{alias.name}"
                for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    used_by_test = [{imported[n.id] for n in ast.walk(f) if isinstance(n, ast.Name) and n.id in imported}
                    for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")]
    for copy, twin in marks:
        assert _resolve(copy) is not None and _resolve(twin) is not None
        assert any({copy, twin} <= used for used in used_by_test), f"no test here checks {copy} against {twin}"


def test_cpu_limits_copies_agree():
    """pretraining/cpu_limits.py is textdata/cpu_limits.py's code under another docstring (its `# Twin of` marks
    aside), and plans the same threads."""
    import inspect

    import pretraining.cpu_limits as twin
    import textdata.cpu_limits as original

    def code(module):
        source = inspect.getsource(module)
        body = source[source.index('"""', 3) + 3 :]  # after the module docstring
        return "\n".join(line for line in body.splitlines() if not MARK.match(line))

    assert code(twin) == code(original)
    for load in (0.0, 1.2, 7.5):
        limits = {"machine": 4, "affinity": 2, "quota": 1.5, "load": load}
        assert pretrain_plan_threads(PretrainCpuLimits(**limits)).as_dict() == plan_threads(CpuLimits(**limits)).as_dict()
