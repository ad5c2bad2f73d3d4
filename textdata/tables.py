"""Reading and writing tables: the one place training and serving agree on file formats.

Everything a user hands us goes through `read_table`, so a bad file gets the same clear message
(file, line, column, value) whichever stage reads it. Writes are atomic: a temp file in the same
folder, then `os.replace`, so a kill never leaves half a file under the real name.
"""

from __future__ import annotations

import codecs
import csv
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from textdata.blank import BLANK
from textdata.errors import DataError
from textdata.parquet_rows import parquet_rows
from textdata.table_limits import TableLimits
from textdata.text_rows import Rows, delimited_rows, jsonl_rows

log = logging.getLogger("textdata")

FORMATS = {".csv": "csv", ".tsv": "tsv", ".txt": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}


def table_format(path: str | os.PathLike) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise DataError(f"{path}: unsupported file type {suffix or '(none)'!r}; use one of {sorted(FORMATS)}")
    return FORMATS[suffix]


def is_utf8(encoding: str) -> bool:
    """Any spelling of UTF-8 (utf-8, UTF8, utf_8, U8, utf-8-sig); an unknown name is a DataError."""
    try:
        return codecs.lookup(encoding).name in ("utf-8", "utf-8-sig")
    except LookupError:
        raise DataError(f"unknown encoding {encoding!r} (e.g. utf-8, cp949)") from None


def read_encoding(encoding: str) -> str:
    """The codec to read text files with: UTF-8 in any spelling reads as utf-8-sig, so the byte-order mark
    Excel writes does not end up in the first column's name."""
    return "utf-8-sig" if is_utf8(encoding) else encoding


def check_encoding(path: Path, encoding: str, block: int = 1 << 20) -> None:
    """Decode the file a block at a time (never a whole line: one line may be the whole file) so the error
    names the line, which pandas' message does not."""
    decoder = codecs.getincrementaldecoder(encoding)()
    lineno, column = 1, 0
    with open(path, "rb") as f:
        while True:
            raw = f.read(block)
            try:
                decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as e:
                at = max(e.start - len(e.object) + len(raw), 0)  # the decoder may hold bytes from the last block
                lineno += raw.count(b"\n", 0, at)
                column = at - raw.rfind(b"\n", 0, at) - 1 if b"\n" in raw[:at] else column + at
                bad = raw[at : at + 4]
                hint = " (Korean files from Excel are often cp949: try --encoding cp949)" if is_utf8(encoding) else ""
                raise DataError(
                    f"{path}: line {lineno} is not valid {encoding} (bytes {bad!r} at column {column + 1}){hint}"
                ) from None
            if not raw:
                return
            newlines = raw.count(b"\n")
            lineno += newlines
            column = len(raw) - raw.rfind(b"\n") - 1 if newlines else column + len(raw)


def _checked_input(path: str | os.PathLike, encoding: str) -> tuple[Path, str, str]:
    """(path, format, the codec to read with) for a file that exists and decodes: every line is decoded before
    the first row is used, so a bad line found after an hour of scoring does not waste the hour."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file")
    if p.is_dir():
        raise DataError(f"{p}: is a folder, expected a file")
    fmt = table_format(p)
    encoding = read_encoding(encoding)
    if fmt != "parquet":
        check_encoding(p, encoding)
    return p, fmt, encoding


def iter_rows(
    path: str | os.PathLike,
    chunk_rows: int,
    columns: Iterable[str] | None = None,
    encoding: str = "utf-8",
    limits: TableLimits | None = None,
) -> Iterator[Rows]:
    """The table in chunks of `chunk_rows` rows, each with the rows that cannot be used (`errors`: a row with
    more fields than the header, or fewer where a column in `columns` is missing; a JSONL line that is no
    object) and those that were changed (`notes`: a cell over `limits.max_cell_chars` cut), by position.

    For callers that keep every row (batch scoring). Strings stay strings (no NA guessing: a text "NA"
    stays text); `columns` must exist (checked on the first chunk); a file with a header and no rows
    yields one empty frame with its columns. Bounded by `limits` (textdata/table_limits.py) before parsing."""
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be positive")
    limits = limits or TableLimits()
    p, fmt, encoding = _checked_input(path, encoding)
    needed = list(columns) if columns is not None else None
    if fmt == "parquet":
        chunks = parquet_rows(p, chunk_rows, limits)
    elif fmt == "jsonl":
        chunks = jsonl_rows(p, encoding, chunk_rows, limits)
    else:
        chunks = delimited_rows(p, "\t" if fmt == "tsv" else ",", encoding, chunk_rows, limits, needed)
    first = True
    for chunk in chunks:
        if first and columns is not None:
            require_columns(chunk.frame, columns, p)
        first = False
        yield chunk


def _strict(chunks: Iterator[Rows], path) -> Iterator[pd.DataFrame]:
    """Chunks for callers that need every row right (training tables): a row problem is an error naming the
    file, row and line; cut cells are logged."""
    for chunk in chunks:
        if chunk.errors:
            first = min(chunk.errors)
            more = f" (and {len(chunk.errors) - 1} more rows in this chunk)" if len(chunk.errors) > 1 else ""
            raise DataError(f"{path}: {chunk.errors[first]}{more}")
        if chunk.notes:
            log.warning("%s: %s%s", path, chunk.notes[min(chunk.notes)],
                        f" (and {len(chunk.notes) - 1} more rows)" if len(chunk.notes) > 1 else "")
        yield chunk.frame


def read_table(
    path: str | os.PathLike,
    columns: Iterable[str] | None = None,
    encoding: str = "utf-8",
    limits: TableLimits | None = None,
) -> pd.DataFrame:
    """Read CSV/TSV/JSONL/Parquet whole, strings as strings; any row that does not fit the header is an
    error (`iter_rows` for its rules and bounds)."""
    frames = list(_strict(iter_rows(path, 1 << 62, columns, encoding, limits), path))
    return frames[0] if len(frames) == 1 else pd.concat(frames)


def require_columns(df: pd.DataFrame, columns: Iterable[str], path: str | os.PathLike) -> None:
    """`columns` may map each name to the flag that set it ({"text": "--text-column"}): the error then
    names the flag, so the user knows how to point at their own column."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        flags = [columns[c] for c in missing if isinstance(columns, dict) and columns[c]]
        fix = f"; name yours with {' / '.join(flags)}" if flags else ""
        raise DataError(
            f"{path}: no column {', '.join(repr(c) for c in missing)}; the columns are {list(map(str, df.columns))}"
            + fix
        )


def missing_text(values: pd.Series) -> pd.Series:
    """True where a cell holds no usable text: NaN/None, or only whitespace or invisible characters
    (NUL, zero-width: textdata/blank.py)."""
    return values.isna() | values.astype(str).str.fullmatch(BLANK.pattern).fillna(False).astype(bool)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs are read by other users (e.g. a serving container)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path: str | os.PathLike, obj) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")


def _has_cr(df: pd.DataFrame) -> bool:
    return any(df[c].astype(str).str.contains("\r", regex=False).any()
               for c in df.columns if not pd.api.types.is_numeric_dtype(df[c]))


def write_table(df: pd.DataFrame, path: str | os.PathLike, fmt: str | None = None, header: bool = True) -> None:
    """Atomic write; `fmt` defaults to the extension; `header=False` for CSV/TSV parts joined later."""
    fmt = fmt or table_format(path)
    with atomic_path(path) as tmp:
        if fmt == "parquet":
            df.to_parquet(tmp, index=False)
        elif fmt == "jsonl":
            df.to_json(tmp, orient="records", lines=True, force_ascii=False)
        else:
            # The csv module quotes "\n" but not a bare "\r", which readers take as a line end: with one in
            # a text, every text cell is quoted (CSV only: TSV is read unquoted).
            quoting = csv.QUOTE_NONNUMERIC if fmt == "csv" and _has_cr(df) else csv.QUOTE_MINIMAL
            df.to_csv(tmp, index=False, header=header, sep="\t" if fmt == "tsv" else ",", quoting=quoting)


def count_rows(path: str | os.PathLike) -> int | None:
    """Row count when it is free (Parquet metadata); None for text formats, which would need a full pass."""
    if table_format(path) != "parquet":
        return None
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def iter_table(
    path: str | os.PathLike,
    chunk_rows: int,
    columns: Iterable[str] | None = None,
    encoding: str = "utf-8",
    limits: TableLimits | None = None,
) -> Iterator[pd.DataFrame]:
    """`read_table` in chunks of `chunk_rows` rows, so a file larger than memory can be processed: the same
    rules, bounds and messages."""
    yield from _strict(iter_rows(path, chunk_rows, columns, encoding, limits), path)
