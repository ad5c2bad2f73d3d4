"""What the UI accepts as an uploaded table, and what it hands back for people to open.

- Only files uploaded to this server: a Gradio call can name any server path as a file argument, and
  under `gr.mount_gradio_app` Gradio's own "was it uploaded?" check is skipped (it only runs after
  `launch()`), so it would copy and read e.g. `/srv/x/secret.csv`. `uploaded_only` makes every UI input refuse such paths
  before Gradio copies them, and `read_upload` checks again before reading.
- Bounded before parsing (`upload_limits`, applied by textdata's shared reader): a 2 MB CSV can hold a
  million empty columns in one row, a 51 KB Parquet file 200 MB of text; columns, one row's characters,
  rows, decompressed bytes and parse time are checked as the file is read, cells over --max-chars are
  cut, the read stops when its client leaves or the server shuts down, and error messages are short.
- Spreadsheet-safe downloads: a cell starting with `=`, `+`, `-`, `@` (or a tab/CR) is a formula to
  Excel and LibreOffice; files a person downloads from the UI get such cells prefixed with `'`. Files
  pipelines read (`labeled.csv` under --data-dir, `python -m serving.score` output) keep the raw text.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pandas as pd
from gradio.utils import get_upload_folder, is_in_or_equal

from textdata.errors import DataError
from textdata.labels import is_formula
from textdata.table_limits import TableLimits
from textdata.tables import iter_rows, missing_text, table_format

MAX_UPLOAD_COLUMNS = 256
MAX_RECORD_CHARS = 1 << 20  # one row longer than this is not a table a person labels
DECOMPRESSED_PER_UPLOAD_BYTE = 5  # a Parquet upload may hold 5x --max-upload-mb once decompressed
READ_DEADLINE_S = 120.0
MAX_MESSAGE_CHARS = 300


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


def upload_limits(cfg, stop=None) -> TableLimits:
    """What an uploaded table may hold, checked by the shared reader before it builds anything
    (textdata/table_limits.py): columns, one row's characters, rows, decompressed bytes (a Parquet file's
    metadata first), parse time; text cells over --max-chars are cut (as the API refuses them) and flagged."""
    upload = int(cfg.max_upload_mb * 1024 * 1024)
    return TableLimits(max_columns=MAX_UPLOAD_COLUMNS, max_record_chars=MAX_RECORD_CHARS, max_cell_chars=cfg.max_chars,
                       max_rows=cfg.max_upload_rows, max_bytes=DECOMPRESSED_PER_UPLOAD_BYTE * upload,
                       max_batch_bytes=min(256 << 20, DECOMPRESSED_PER_UPLOAD_BYTE * upload),
                       deadline_s=READ_DEADLINE_S, stop=stop,
                       flags={"max_rows": "--max-upload-rows", "max_bytes": f"{DECOMPRESSED_PER_UPLOAD_BYTE} x "
                              "--max-upload-mb", "max_columns": "the UI's limit"})


def read_upload(cfg, file, text_column: str, stop=None) -> tuple[pd.DataFrame, str, dict, dict]:
    """The uploaded table (at most --max-upload-rows rows), the name of its text column, and by position
    the rows the reader could not read right (`errors`) and those it cut (`notes`). `stop` () -> a reason
    or None ends the read early (the client left, the server is shutting down)."""
    path = uploaded_path(file)
    if path.stat().st_size > cfg.max_upload_mb * 1024 * 1024:
        raise gr.Error(f"The file is over {cfg.max_upload_mb:g} MB (--max-upload-mb).")
    wanted = (text_column or "").strip() or "text"
    try:
        # The text column first (JSONL: keys may appear on any line, so chosen after), so a short row is
        # flagged only when it lacks that column.
        column = None if table_format(path) == "jsonl" else _text_column(_header(path, cfg, stop), wanted)
        chunks = iter_rows(path, cfg.max_upload_rows + 1, columns=None if column is None else [column],
                           limits=upload_limits(cfg, stop))
        df, errors, notes = next(chunks)
        chunks.close()
    except DataError as e:
        raise gr.Error(_short(str(e).replace(str(path), path.name))) from None  # never show server paths
    column = column or _text_column([str(c) for c in df.columns], wanted)
    if len(df) == 0:
        raise gr.Error("The file has no rows.")
    return df, column, errors, notes


def read_texts(cfg, file, text_column: str, stop=None) -> tuple[list[str], int]:
    """The uploaded table's texts, in file order, and how many rows had none (skipped): for the Label tab's
    sessions and the Team tab's datasets, whose texts must be the file's rows, so a row the reader could not read
    right (a shifted row is not labeled as it reads) refuses the file, naming it."""
    df, column, errors, _ = read_upload(cfg, file, text_column, stop)
    if errors:
        first = min(errors)
        more = f" (and {len(errors) - 1} more rows)" if len(errors) > 1 else ""
        raise gr.Error(f"{Path(file).name}: {errors[first]}{more}"[:300])
    keep = ~missing_text(df[column])
    texts = df.loc[keep, column].astype(str).tolist()
    if not texts:
        raise gr.Error(f"Column {column!r} has no text.")
    return texts, int((~keep).sum())


def _header(path: Path, cfg, stop) -> list[str]:
    chunks = iter_rows(path, 1, limits=upload_limits(cfg, stop))
    names = [str(c) for c in next(chunks).frame.columns]
    chunks.close()
    return names


def _text_column(names: list[str], wanted: str) -> str:
    if wanted in names:
        return wanted
    if len(names) == 1:
        return names[0]
    shown = ", ".join(repr(c[:40]) for c in names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    raise gr.Error(_short(f"No column {wanted[:60]!r}; the columns are {shown}. Type the name of the text column."))


def _neutral(value):
    if is_formula(value):
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
