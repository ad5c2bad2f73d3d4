"""What the UI accepts as an uploaded table, and what it hands back for people to open.

- Only files uploaded to this server: a Gradio call can name any server path as a file argument, and
  under `gr.mount_gradio_app` Gradio's own "was it uploaded?" check is skipped (it only runs after
  `launch()`), so it would copy and read e.g. `/srv/x/secret.csv`. `uploaded_only` makes every UI input refuse such paths
  before Gradio copies them, and `read_upload` checks again before reading.
- Bounded before parsing: a 2 MB CSV can hold a million empty columns (gigabytes once parsed), so the
  header (or Parquet's metadata, or each JSONL line) is checked first, rows are read at most one past
  the limit, and error messages are short.
- Spreadsheet-safe downloads: a cell starting with `=`, `+`, `-`, `@` (or a tab/CR) is a formula to
  Excel and LibreOffice; files a person downloads from the UI get such cells prefixed with `'`. Files
  pipelines read (`labeled.csv` under --data-dir, `python -m serving.score` output) keep the raw text.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import gradio as gr
import pandas as pd
from gradio.utils import get_upload_folder, is_in_or_equal

from textdata.errors import DataError
from textdata.tables import iter_table, table_format

MAX_UPLOAD_COLUMNS = 256
HEADER_PEEK_BYTES = 1 << 20  # a header longer than this is not a table a person labels
MAX_MESSAGE_CHARS = 300
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"^[+-]?(\d+([.,]\d*)*|\.\d+)([eE][+-]?\d+)?$")


def uploaded_path(file) -> Path:
    """`file` as a Path if Gradio's upload folder for this process holds it; gr.Error otherwise."""
    if not file:
        raise gr.Error("Upload a file first.")
    path = Path(str(file))
    if not is_in_or_equal(path, get_upload_folder()) or not path.is_file():
        raise gr.Error("Only files uploaded through this page can be read.")
    return path


def uploaded_only(component):
    """`component` (any input: Gradio looks for file references in every value, not only a gr.File's),
    made to refuse files not uploaded to this server before Gradio copies them into its cache. Instance attributes rather than a subclass: Gradio writes a .pyi beside the module of every
    Component subclass, which fails in a read-only install."""
    move, move_async = component.move_resource_to_block_cache, component.async_move_resource_to_block_cache

    def checked(path):
        if path is not None:
            uploaded_path(path)
        return move(path)

    async def checked_async(path):
        if path is not None:
            uploaded_path(path)
        return await move_async(path)

    component.move_resource_to_block_cache = checked
    component.async_move_resource_to_block_cache = checked_async
    return component


def _short(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 1] + "…"


def _check_shape(path: Path, fmt: str, max_rows: int) -> None:
    """Columns (and, where free, rows) within limits, before pandas builds anything."""
    limit = f"the UI takes at most {MAX_UPLOAD_COLUMNS} columns"
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            meta = pq.ParquetFile(path).metadata
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise gr.Error(_short(f"{path.name}: cannot read as Parquet: {e}")) from None
        if meta.num_columns > MAX_UPLOAD_COLUMNS:
            raise gr.Error(f"{path.name}: {meta.num_columns} columns; {limit}.")
        if meta.num_rows > max_rows:
            raise gr.Error(f"{meta.num_rows} rows; the limit is {max_rows} (--max-upload-rows).")
        return
    if fmt == "jsonl":
        keys: set[str] = set()
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise gr.Error(f"{path.name}: line {lineno} is not JSON.") from None
                if not isinstance(obj, dict):
                    raise gr.Error(f"{path.name}: line {lineno} is not a JSON object.")
                if len(obj) > MAX_UPLOAD_COLUMNS or len(keys.union(obj)) > MAX_UPLOAD_COLUMNS:
                    raise gr.Error(f"{path.name}: over {MAX_UPLOAD_COLUMNS} keys by line {lineno}; {limit}.")
                keys.update(obj)
                if lineno > max_rows + 1:
                    break  # the row limit is checked on the parsed table
        return
    with open(path, "rb") as f:
        head = f.read(HEADER_PEEK_BYTES).decode("utf-8-sig", "replace")
    if "\n" not in head and len(head) >= HEADER_PEEK_BYTES:
        raise gr.Error(f"{path.name}: the first line is over {HEADER_PEEK_BYTES >> 20} MB; is this a table?")
    try:
        first = head.partition("\n")[0].split("\t") if fmt == "tsv" else next(csv.reader(io.StringIO(head)), [])
    except csv.Error as e:
        raise gr.Error(_short(f"{path.name}: cannot read the header: {e}")) from None
    if len(first) > MAX_UPLOAD_COLUMNS:
        raise gr.Error(f"{path.name}: {len(first)} or more columns; {limit}.")


def read_upload(cfg, file, text_column: str) -> tuple[pd.DataFrame, str]:
    """The uploaded table (at most --max-upload-rows rows) and the name of its text column."""
    path = uploaded_path(file)
    if path.stat().st_size > cfg.max_upload_mb * 1024 * 1024:
        raise gr.Error(f"The file is over {cfg.max_upload_mb:g} MB (--max-upload-mb).")
    try:
        fmt = table_format(path)
        _check_shape(path, fmt, cfg.max_upload_rows)
        chunks = iter_table(path, chunk_rows=cfg.max_upload_rows + 1)
        df = next(chunks)
        extra = next(chunks, None)
        chunks.close()
    except DataError as e:
        raise gr.Error(_short(str(e).replace(str(path), path.name))) from None  # never show server paths
    if len(df) > cfg.max_upload_rows or (extra is not None and len(extra)):
        raise gr.Error(f"over {cfg.max_upload_rows} rows; the limit is {cfg.max_upload_rows} (--max-upload-rows).")
    wanted = (text_column or "").strip() or "text"
    if wanted in df.columns:
        column = wanted
    elif len(df.columns) == 1:
        column = str(df.columns[0])
    else:
        names = [str(c) for c in df.columns]
        shown = ", ".join(repr(c[:40]) for c in names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
        raise gr.Error(_short(f"No column {wanted[:60]!r}; the columns are {shown}. Type the name of the text column."))
    if len(df) == 0:
        raise gr.Error("The file has no rows.")
    return df, column


def _neutral(value):
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _NUMBER.match(value):
        return "'" + value
    return value


def spreadsheet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text cells cannot run as spreadsheet formulas (`'` prefixed), numbers untouched."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(_neutral)
    out.columns = [_neutral(str(c)) for c in out.columns]
    return out
