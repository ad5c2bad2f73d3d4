"""Reading and writing tables: the one place training and serving agree on file formats.

Everything a user hands us goes through `read_table`, so a bad file gets the same clear message
(file, line, column, value) whichever stage reads it. Writes are atomic: a temp file in the same
folder, then `os.replace`, so a kill never leaves half a file under the real name.
"""

from __future__ import annotations

import codecs
import csv
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from textdata.errors import DataError

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


def check_encoding(path: Path, encoding: str) -> None:
    """Decode line by line so the error names the line, which pandas' message does not."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                raw.decode(encoding)
            except UnicodeDecodeError as e:
                bad = raw[e.start : e.start + 4]
                hint = " (Korean files from Excel are often cp949: try --encoding cp949)" if is_utf8(encoding) else ""
                raise DataError(
                    f"{path}: line {lineno} is not valid {encoding} (bytes {bad!r} at column {e.start + 1}){hint}"
                ) from None


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


def read_table(
    path: str | os.PathLike,
    columns: Iterable[str] | None = None,
    encoding: str = "utf-8",
) -> pd.DataFrame:
    """Read CSV/TSV/JSONL/Parquet as strings (no NA guessing: a text "NA" stays text)."""
    p, fmt, encoding = _checked_input(path, encoding)
    try:
        if fmt == "csv":
            df = pd.read_csv(p, dtype=str, keep_default_na=False, encoding=encoding)
        elif fmt == "tsv":
            df = pd.read_csv(p, sep="\t", dtype=str, keep_default_na=False, quoting=3, encoding=encoding)
        elif fmt == "jsonl":
            df = pd.read_json(p, lines=True, dtype=False, encoding=encoding)
        else:
            df = pd.read_parquet(p)
    except pd.errors.EmptyDataError:
        raise DataError(f"{p}: the file is empty") from None
    except (pd.errors.ParserError, ValueError, OSError) as e:
        raise DataError(f"{p}: cannot parse as {fmt}: {str(e).strip().splitlines()[0]}") from None
    if columns is not None:
        require_columns(df, columns, p)
    return df


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
    """True where a cell holds no usable text: NaN/None or only whitespace."""
    return values.isna() | values.astype(str).str.strip().eq("")


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
) -> Iterator[pd.DataFrame]:
    """`read_table` in chunks of `chunk_rows` rows, so a file larger than memory can be processed.

    Same parsing rules and messages as `read_table`; `columns` are checked on the first chunk, and a
    file with a header but no rows yields one empty frame so callers still see its columns.
    """
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be positive")
    p, fmt, encoding = _checked_input(path, encoding)
    try:
        if fmt == "csv":
            chunks = pd.read_csv(p, dtype=str, keep_default_na=False, chunksize=chunk_rows,
                                 encoding=encoding)
        elif fmt == "tsv":
            chunks = pd.read_csv(p, sep="\t", dtype=str, keep_default_na=False, quoting=3, chunksize=chunk_rows,
                                 encoding=encoding)
        elif fmt == "jsonl":
            chunks = pd.read_json(p, lines=True, dtype=False, encoding=encoding, chunksize=chunk_rows)
        else:
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(p)
            schema = pf.schema_arrow
            batches = pf.iter_batches(batch_size=chunk_rows)
            chunks = (b.to_pandas() for b in batches)
            empty = schema.empty_table().to_pandas()
        first = True
        for chunk in chunks:
            if first and columns is not None:
                require_columns(chunk, columns, p)
            first = False
            yield chunk
        if first:
            if fmt == "parquet":
                chunk = empty
            else:
                chunk = pd.read_csv(p, dtype=str, nrows=0, sep="\t" if fmt == "tsv" else ",", encoding=encoding) \
                    if fmt != "jsonl" \
                    else pd.DataFrame()
            if columns is not None:
                require_columns(chunk, columns, p)
            yield chunk
    except pd.errors.EmptyDataError:
        raise DataError(f"{p}: the file is empty") from None
    except (pd.errors.ParserError, ValueError, OSError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"{p}: cannot parse as {fmt}: {str(e).strip().splitlines()[0]}") from None
