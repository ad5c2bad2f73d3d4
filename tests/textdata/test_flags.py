"""Flags built from config dataclasses: one default per setting, each shown in --help (issue 23, item 3)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from textdata.errors import UsageError
from textdata.flags import Flag, config_from, parser_for


@dataclass(frozen=True)
class Example:
    model: Path
    rows: int = 2048
    limit: int | None = None
    rate: float = 0.5
    fast: bool = False
    progress: bool = True
    quantized: bool | None = None
    names: tuple[str, ...] = ("a", "b")
    mode: str = "x"


FLAGS = {"mode": Flag("how", choices=("x", "y")),
         "quantized": Flag(name="--fp32", const=False, also=(("--int8", True, "the other file"),)),
         "limit": Flag("cap", shown="no cap", metavar="N")}


def test_fields_become_flags_with_their_defaults():
    ap = parser_for(Example, "ex", "example", FLAGS)
    cfg = config_from(Example, ap.parse_args(["--model", "m"]))
    assert cfg == Example(model=Path("m"))
    cfg = config_from(Example, ap.parse_args(["--model", "m", "--rows", "3", "--limit", "4", "--rate", "1.5",
                                              "--fast", "--no-progress", "--fp32", "--names", "c", "d",
                                              "--mode", "y"]))
    assert cfg == Example(Path("m"), 3, 4, 1.5, True, False, False, ("c", "d"), "y")
    assert config_from(Example, ap.parse_args(["--model", "m", "--int8"])).quantized is True
    with pytest.raises(SystemExit):
        ap.parse_args(["--model", "m", "--mode", "z"])
    with pytest.raises(SystemExit):
        ap.parse_args([])  # --model is required


def test_help_shows_every_default():
    text = parser_for(Example, "ex", "example", FLAGS).format_help()
    for expected in ["(required)", "(default: 2048)", "--limit N cap (default: no cap)", "--int8 the other file", "(default: 0.5)", "(default: off)",
                     "(default: progress on)", "(default: a, b)", "how (default: x)"]:
        assert expected in " ".join(text.split()), expected


def test_unknown_settings_fail_loudly():
    with pytest.raises(UsageError, match="unknown settings"):
        config_from(Example, {"model": Path("m"), "row": 3})
    with pytest.raises(ValueError, match="no field"):
        parser_for(Example, "ex", "example", {"row": Flag()})


def _options_without_default(parser: argparse.ArgumentParser) -> list[str]:
    missing = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if not re.search(r"\((default: [^)]|required\))", action.help or ""):
            missing.append(action.option_strings[0])
    return missing


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from finetune import kfold
    from serving import export, score

    return {"score": score.build_parser("local"), "score --engine ray": score.build_parser("ray"),
            "export": export.build_parser(), "kfold": kfold.build_parser()}


def test_every_cli_flag_shows_its_default():
    for name, parser in _parsers().items():
        assert _options_without_default(parser) == [], name


def test_app_help_shows_every_default(monkeypatch):
    from app.config import build_parser

    monkeypatch.setenv("COLUMNS", "400")  # one line per flag: no wrapping inside the text searched

    parser = build_parser()
    assert _options_without_default(parser) == []
    text = " ".join(parser.format_help().split())
    for flag, default in [("--max-texts", 64), ("--max-chars", 5000), ("--max-body-bytes", 2 * 1024 * 1024),
                          ("--max-queue", 512)]:
        assert re.search(rf"{flag} \S+ [^()]*\(default: {default}\)", text), flag


def test_pretraining_help_shows_each_presets_default(monkeypatch):
    from pretraining.config import build_parser

    monkeypatch.setenv("COLUMNS", "400")
    parser = build_parser("pretraining")
    assert _options_without_default(parser) == []
    text = parser.format_help()
    assert "(default: 1000000; --preset tiny: 2000, --preset base: 766000)" in text
    assert "(default: 0.0005; --preset tiny: 0.001, --preset base: 0.0002)" in text
    assert "default: preset, else" not in text
