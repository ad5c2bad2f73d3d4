"""CSV, TSV and JSONL read row by row, within `TableLimits`, as chunks of rows with their problems.

Why not pandas' parser: it takes a first data row with more fields than the header as index columns (the
row's text moved one column right, every row after it too, no error), and it parses a row of a million
commas into a million columns before anything can look. Here each record is read through a reader that
counts its characters before the csv module splits it, its fields are counted against the header, and
cells are cut where over the limit; a row with the wrong number of fields is reported with its row and
line, never shifted. The caller (textdata/tables.py) decides whether a problem is an error or a flag.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from textdata.errors import DataError
from textdata.table_limits import TableLimitError, TableLimits, Watch, cut_note, cut_text

PREVIEW_CHARS = 80


class Rows(NamedTuple):
    """One chunk: the frame, and by position in it the rows that cannot be used (`errors`: the reason) and
    the rows that were changed (`notes`: a cell cut)."""

    frame: pd.DataFrame
    errors: dict[int, str]
    notes: dict[int, str]


class _Lines:
    """The file's lines for csv.reader, each read with a bound, and the characters of the current record
    (reset by the caller after each row): a record over the limit is refused before it is split."""

    def __init__(self, f, where, limits: TableLimits):
        self.f, self.where, self.limits = f, where, limits
        self.lineno = 0
        self.record_chars = 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        limit = self.limits.max_record_chars
        line = self.f.readline(limit + 1)
        if not line:
            raise StopIteration
        self.lineno += 1
        self.record_chars += len(line)
        if self.record_chars > limit:
            raise TableLimitError(f"{self.where}: line {self.lineno}: a row of over {limit} characters"
                                  f"{self.limits.hint('max_record_chars')}; is this a table? (a quote never closed "
                                  "makes the rest of the file one field)")
        return line


def column_names(header: list[str]) -> list[str]:
    """pandas' names for a header: an empty name is 'Unnamed: i', a repeated one gets '.1', '.2', ..."""
    out, seen = [], set()
    for i, name in enumerate(header):
        name = name or f"Unnamed: {i}"
        base, k = name, 0
        while name in seen:
            k += 1
            name = f"{base}.{k}"
        seen.add(name)
        out.append(name)
    return out


def _preview(fields: list[str], sep: str) -> str:
    text = sep.join(fields[:PREVIEW_CHARS])
    return repr(text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…")


def _cut_row(row: list, names: list[str], limits: TableLimits) -> str | None:
    n, notes = limits.max_cell_chars, []
    for i, value in enumerate(row):
        if isinstance(value, str) and len(value) > n:
            notes.append(cut_note(names[i], n))
            row[i] = cut_text(value, n, limits.cut)
    return "; ".join(notes) or None


def delimited_rows(path: Path, sep: str, encoding: str, chunk_rows: int, limits: TableLimits,
                   needed: Iterable[str] | None) -> Iterator[Rows]:
    """CSV (sep ',', quoted as Excel writes it, strictly) or TSV (sep '\\t', no quoting), `chunk_rows` at a time.

    A row with more fields than the header is a problem; one with fewer is filled with empty cells, and a
    problem when it lacks a column in `needed` (all columns when `needed` is None)."""
    watch = Watch(limits, path)
    quoting = {"quoting": csv.QUOTE_NONE} if sep == "\t" else {"strict": True}
    # The module's own per-field bound (128 KiB) would refuse long texts; records are bounded by _Lines.
    csv.field_size_limit(max(csv.field_size_limit(), limits.max_record_chars))
    with open(path, encoding=encoding, newline="") as f:
        lines = _Lines(f, path, limits)
        reader = csv.reader(lines, delimiter=sep, **quoting)
        try:
            header = next((row for row in reader if row), None)
            if header is None:
                raise DataError(f"{path}: the file is empty")
            if len(header) > limits.max_columns:
                raise TableLimitError(f"{path}: {len(header)} columns in the header; the limit is "
                                      f"{limits.max_columns}{limits.hint('max_columns')}")
            yield from _delimited_chunks(path, sep, reader, lines, column_names(header), chunk_rows, limits,
                                         needed, watch)
        except csv.Error as e:
            raise DataError(f"{path}: line {lines.lineno}: cannot parse as {'tsv' if sep == chr(9) else 'csv'}: {e}"
                            ) from None


def _delimited_chunks(path, sep, reader, lines: _Lines, names: list[str], chunk_rows: int, limits: TableLimits,
                      needed, watch: Watch) -> Iterator[Rows]:
    n = len(names)
    must = range(n) if needed is None else [names.index(c) for c in needed if c in names]
    last_needed = max(must, default=-1)
    hint = "a tab inside a text?" if sep == "\t" else "a comma inside a text not in double quotes?"
    rows, errors, notes, offset, rownum = [], {}, {}, 0, 0
    start = lines.lineno + 1
    lines.record_chars = 0
    for row in reader:
        chars, lines.record_chars = lines.record_chars, 0
        line, start = start, lines.lineno + 1
        if not row:
            continue  # a blank line is not a row (as pandas reads it)
        rownum += 1
        if limits.max_rows is not None and rownum > limits.max_rows:
            raise TableLimitError(f"{path}: over {limits.max_rows} rows; the limit is {limits.max_rows}"
                                  f"{limits.hint('max_rows')}")
        k = len(row)
        if k > n:
            errors[len(rows)] = (f"row {rownum} (line {line}): {k} fields, the header has {n} ({hint}); "
                                 f"the row begins {_preview(row, sep)}")
            del row[n:]
        elif k < n:
            if k <= last_needed:
                missing = ", ".join(repr(names[i]) for i in must if i >= k)
                errors[len(rows)] = (f"row {rownum} (line {line}): {k} field{'s' if k != 1 else ''}, the header "
                                     f"has {n}: no {missing}; the row begins {_preview(row, sep)}")
            row.extend([""] * (n - k))
        if limits.max_cell_chars is not None and chars > limits.max_cell_chars:
            note = _cut_row(row, names, limits)
            if note:
                notes[len(rows)] = f"row {rownum} (line {line}): {note}"
        rows.append(row)
        watch.tick()
        if len(rows) == chunk_rows:
            yield Rows(_frame(rows, names, offset), errors, notes)
            offset += len(rows)
            rows, errors, notes = [], {}, {}
    if rows or offset == 0:
        yield Rows(_frame(rows, names, offset), errors, notes)


def _frame(rows: list[list[str]], names: list[str], offset: int) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=names, dtype=str) if rows else pd.DataFrame(columns=names, dtype=str)
    df.index = pd.RangeIndex(offset, offset + len(df))  # chunks continue the row numbers, as pandas' do
    return df


def jsonl_rows(path: Path, encoding: str, chunk_rows: int, limits: TableLimits) -> Iterator[Rows]:
    """JSON Lines: one object per line (blank lines skipped); a line that is not an object is a problem."""
    watch = Watch(limits, path)
    keys: dict[str, None] = {}
    rows, errors, notes, offset, rownum = [], {}, {}, 0, 0
    with open(path, encoding=encoding, newline="") as f:
        lines = _Lines(f, path, limits)
        for text in lines:
            chars, lines.record_chars = lines.record_chars, 0
            if not text.strip():
                continue
            rownum += 1
            if limits.max_rows is not None and rownum > limits.max_rows:
                raise TableLimitError(f"{path}: over {limits.max_rows} rows; the limit is {limits.max_rows}"
                                      f"{limits.hint('max_rows')}")
            obj, where = _json_object(text), f"row {rownum} (line {lines.lineno})"
            if isinstance(obj, str):
                errors[len(rows)] = f"{where}: {obj}; the row begins {_preview([text.strip()], '')}"
                obj = {}
            keys.update(dict.fromkeys(obj))
            if len(keys) > limits.max_columns:
                raise TableLimitError(f"{path}: over {limits.max_columns} keys by line {lines.lineno}; the limit "
                                      f"is {limits.max_columns}{limits.hint('max_columns')}")
            if limits.max_cell_chars is not None and chars > limits.max_cell_chars:
                values = list(obj.values())
                note = _cut_row(values, list(obj), limits)
                if note:
                    obj = dict(zip(obj, values))
                    notes[len(rows)] = f"{where}: {note}"
            rows.append(obj)
            watch.tick()
            if len(rows) == chunk_rows:
                yield Rows(_records(rows, offset), errors, notes)
                offset += len(rows)
                rows, errors, notes = [], {}, {}
    if rows or offset == 0:
        if rownum == 0 and path.stat().st_size == 0:
            raise DataError(f"{path}: the file is empty")
        yield Rows(_records(rows, offset), errors, notes)


def _json_object(text: str) -> dict | str:
    """The line's object, or why it is not one."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        return f"not JSON ({str(e).splitlines()[0][:80]})"
    return obj if isinstance(obj, dict) else f"not a JSON object (a {type(obj).__name__})"


def _records(rows: list[dict], offset: int) -> pd.DataFrame:
    df = pd.DataFrame.from_records(rows) if rows else pd.DataFrame()
    df.index = pd.RangeIndex(offset, offset + len(df))
    return df
