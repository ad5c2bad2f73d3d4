"""Cheap checks of what a command line names, made before the slow imports: the file exists, and a CSV/TSV
header holds the columns the flags name.

torch and transformers take 5-20 s to import; a typo'd path or column must not wait for them (issue 31). The
full checks still happen where the file is read (textdata/tables.py `read_table`: every line decoded, every
format parsed); these only catch the common mistakes early, with the same wording. Nothing here imports
pandas or numpy.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from textdata.errors import DataError

_HEADER_SEPARATORS = {".csv": ",", ".tsv": "\t", ".txt": "\t"}


def check_file(path: str | os.PathLike, flag: str = "") -> Path:
    p = Path(path)
    given = f"{flag} " if flag else ""
    if not p.exists():
        raise DataError(f"{given}{p}: no such file")
    if p.is_dir():
        raise DataError(f"{given}{p}: is a folder, expected a file")
    return p


def header(path: Path, encoding: str = "utf-8") -> list[str] | None:
    """The column names of a CSV/TSV file's first line, or None where that cannot be told cheaply (another
    format, an undecodable or empty first line: `read_table` says what is wrong then)."""
    sep = _HEADER_SEPARATORS.get(path.suffix.lower())
    if sep is None:
        return None
    try:
        with open(path, encoding="utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding,
                  newline="") as f:
            first = f.readline(1 << 20)
    except (OSError, LookupError, UnicodeDecodeError):
        return None
    if not first.strip():
        return None
    if sep == "\t":  # read_table reads TSV unquoted
        return first.rstrip("\r\n").split("\t")
    try:
        return next(csv.reader(io.StringIO(first)))
    except (csv.Error, StopIteration):
        return None  # a quoted field spanning lines: the full reader decides


def check_table(path: str | os.PathLike, columns: dict[str, str], encoding: str = "utf-8", flag: str = "") -> Path:
    """`path` exists and, for CSV/TSV, its header names every column in `columns` ({name: the flag that set
    it}); the message says which flag names the user's own column."""
    p = check_file(path, flag)
    names = header(p, encoding)
    if names is None:
        return p
    missing = [c for c in columns if c not in names]
    if missing:
        flags = [columns[c] for c in missing if columns[c]]
        fix = f"; name yours with {' / '.join(flags)}" if flags else ""
        raise DataError(f"{p}: no column {', '.join(repr(c) for c in missing)}; the columns are {names}{fix}")
    return p


def check_folder(path: str | os.PathLike, flag: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"{flag} {path}: no such folder")
    if not p.is_dir():
        raise DataError(f"{flag} {path}: is a file, expected a folder")
    return p


# Each entry point says this inline when the project itself cannot be imported (it cannot import this then).
ENV_HINT = "activate the project's venv (source .venv/bin/activate) or install it: pip install -e ."


def hint_on_missing_module(kind, value, tb) -> None:
    """sys.excepthook for an entry point: a library missing from this Python (run outside the project's venv)
    is one line saying what to do, not a traceback; anything else keeps its traceback."""
    import sys

    if issubclass(kind, ModuleNotFoundError):
        print(f"error: {value}: {ENV_HINT}", file=sys.stderr)  # the exit status stays 1
        return
    sys.__excepthook__(kind, value, tb)


def check_before_imports(parse, check=None, argv: list[str] | None = None) -> None:
    """An entry script's first step, before its heavy imports: parse the flags (argparse exits on --help and on
    a bad flag) and check the paths they name. A user error prints one line and exits 2; a parse that returns
    None has done the whole job (e.g. --list-models) and exits 0. Otherwise the script goes on and parses again
    (cheaply) in its main(). Also installs `hint_on_missing_module` for the imports that follow."""
    import sys

    from textdata.errors import UserError

    sys.excepthook = hint_on_missing_module
    try:
        cfg = parse(argv)
        if cfg is None:
            raise SystemExit(0)
        if check is not None:
            check(cfg)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
