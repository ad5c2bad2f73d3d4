"""Command-line flags built from a CLI's frozen config dataclass: one default per setting, and `--help` shows it.

Each field becomes `--field-name` with its type read from the annotation and its default from the field; a
`Flag` adds what the dataclass cannot say (help, choices, another flag name, a default worked out later).
`pretraining/config.py` `build_parser` builds its flags the same way from its presets (a marked twin:
pretraining imports no other package; tests/textdata/test_twins.py checks that the two agree).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from textdata.errors import UsageError

_UNSET = object()


@dataclass(frozen=True)
class Flag:
    help: str = ""
    name: str | None = None  # default: --field-name; for a bool that defaults on: --no-field-name
    choices: Sequence | None = None
    type: Callable[[str], Any] | None = None  # default: the annotation's
    const: Any = _UNSET  # a bool | None field set to this by a bare flag (e.g. --fp32 -> False)
    shown: str | None = None  # the default in words, where the field's is worked out later (e.g. "usable cores")
    repeat: bool = False  # a tuple field: give the flag once per value
    also: tuple = ()  # more bare flags setting the field, as (name, const, help): e.g. --int8 beside --fp32
    metavar: str | None = None  # the value's name in --help (default: argparse's, the flag in capitals)


class DefaultsHelp(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks (module docstrings hold the exact commands)."""


class Parser(argparse.ArgumentParser):
    """argparse's parser with one-line errors: a mistyped flag names the closest one ("did you mean --folds?")
    instead of 24 lines of usage above "unrecognized arguments"."""

    def error(self, message: str):
        print(f"{self.prog}: error: {flag_hint(message, list(self._option_string_actions))} (--help lists every "
              "flag)", file=sys.stderr)
        raise SystemExit(2)


def flag_hint(message: str, known: list[str]) -> str:
    """argparse's error `message` with the closest known flag to each unrecognized one."""
    head = "unrecognized arguments: "
    if not message.startswith(head):
        return message
    said = []
    for token in message[len(head):].split():
        if not token.startswith("-"):
            continue  # the value that followed the unknown flag
        close = difflib.get_close_matches(token.split("=", 1)[0], known, n=1, cutoff=0.6)
        said.append(f"unknown flag {token}" + (f": did you mean {close[0]}?" if close else ""))
    return "; ".join(said) or message


def _value_type(hint):
    """The type a flag's string becomes: X for `X | None`."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        return next(a for a in args if a is not type(None))
    return hint


def _shown(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def add_flags(parser: argparse.ArgumentParser, cls: type, flags: dict[str, Flag] | None = None,
              skip: Sequence[str] = (), prefix: str = "") -> None:
    """One flag per field of `cls` (except `skip`), in field order; with `prefix` (a nested config, e.g.
    "adapt_") the flags and their dests carry it: --adapt-steps sets adapt_steps."""
    flags = flags or {}
    unknown = sorted(set(flags) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"flags for no field of {cls.__name__}: {unknown}")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        spec = flags.get(f.name, Flag())
        kind = _value_type(hints[f.name])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = None if required else (f.default if f.default is not dataclasses.MISSING else f.default_factory())
        dest = prefix + f.name
        name = spec.name or "--" + dest.replace("_", "-")
        shown = spec.shown if spec.shown is not None else _shown(default)
        if kind is bool and default is True and spec.const is _UNSET and spec.shown is None:
            shown = f"{f.name.replace('_', ' ')} on"  # the flag is --no-...: say what it turns off
        text = (spec.help + " " if spec.help else "") + ("(required)" if required else f"(default: {shown})")
        kw: dict[str, Any] = {"dest": dest, "help": text.replace("%", "%%")}
        if spec.const is not _UNSET:
            kw.update(action="store_const", const=spec.const, default=default)
        elif kind is bool:
            if default:
                name = spec.name or "--no-" + dest.replace("_", "-")
            kw.update(action="store_false" if default else "store_true", default=default)
        elif typing.get_origin(kind) is tuple and spec.type is None:
            item = typing.get_args(kind)[0]
            kw.update(type=item, default=list(default or ()),
                      **({"action": "append"} if spec.repeat else {"nargs": "+"}))
        else:
            kw.update(type=spec.type or kind, default=default, required=required)
            if spec.choices is not None:
                kw["choices"] = list(spec.choices)
            if spec.metavar:
                kw["metavar"] = spec.metavar
        parser.add_argument(name, **kw)
        for other, const, about in spec.also:
            parser.add_argument(other, dest=dest, action="store_const", const=const, default=default,
                                help=f"{about} (default: {shown})".replace("%", "%%"))


def parser_for(cls: type, prog: str, description: str, flags: dict[str, Flag] | None = None,
               skip: Sequence[str] = (), epilog: str | None = None) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=description, epilog=epilog, formatter_class=DefaultsHelp,
                                     allow_abbrev=False)  # `--epoch 1` must not be taken as --epochs
    add_flags(parser, cls, flags, skip)
    return parser


def config_from(cls: type, args: argparse.Namespace | dict, prefix: str = "", **overrides):
    """The config from parsed flags (those starting with `prefix`, which is removed): tuple fields back to
    tuples; a value no field takes is refused."""
    given = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    if prefix:
        given = {k[len(prefix):]: v for k, v in given.items() if k.startswith(prefix)}
    values = {**given, **overrides}
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise UsageError(f"unknown settings {unknown} for {cls.__name__}")
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        if isinstance(value, list) and typing.get_origin(_value_type(hints[name])) is tuple:
            values[name] = tuple(value)
    return cls(**values)
