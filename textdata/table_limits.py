"""The bounds every table reader applies before it builds a table (textdata/tables.py and its readers).

A file is data from outside: a 1 MB first row of commas was a million columns (18 minutes and 5 GB in
pandas), a 51 KB Parquet file held 200 MB of text, and a row with one field too many shifted every column
silently. So each reader works row by row (or Parquet batch by batch) and checks, before it builds
anything: the columns (header fields, JSONL keys, Parquet columns), the characters in one record (one CSV
line, or one quoted record over several lines; one JSONL line), the rows, the decompressed bytes (Parquet's
metadata first, then each decoded batch), and the time. Cells longer than `max_cell_chars` are cut
(keeping what the engine would read: the head, or head and tail) and the row is flagged. `stop` is asked
every few hundred rows, so a server can end a read when its client leaves or it shuts down.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from textdata.errors import DataError

CHECK_EVERY_ROWS = 512  # rows between two looks at the clock and at `stop`


class TableLimitError(DataError):
    """The file is over one of the bounds: the message names the file, the bound and how to change it."""


class ReadStopped(DataError):
    """`stop` asked the read to end (the client left, the server is shutting down) or the deadline passed."""


@dataclass(frozen=True)
class TableLimits:
    max_columns: int = 4096  # header fields, JSONL keys (all lines together), Parquet columns
    max_record_chars: int = 8 << 20  # one CSV/TSV record (its lines, quoted newlines included) or JSONL line
    max_cell_chars: int | None = 100_000  # longer text cells are cut and the row flagged; None: kept whole
    cut: str = "head"  # which part of a cut cell is kept: "head", "head+tail" or "tail" (the engine's truncation)
    max_rows: int | None = None
    max_bytes: int | None = None  # decompressed bytes of the whole table (Parquet: before reading, by metadata)
    max_batch_bytes: int = 256 << 20  # decoded bytes of one Parquet batch
    deadline_s: float | None = None  # seconds the whole read may take
    stop: Callable[[], str | None] | None = field(default=None, compare=False)  # a reason to stop, or None
    flags: dict = field(default_factory=dict, compare=False)  # limit -> the flag that sets it, for messages

    def hint(self, name: str) -> str:
        flag = self.flags.get(name)
        return f" ({flag})" if flag else ""


class Watch:
    """The deadline and `stop`, looked at every CHECK_EVERY_ROWS rows (cheap enough for every row loop)."""

    def __init__(self, limits: TableLimits, where):
        self.limits, self.where = limits, where
        self.deadline = None if limits.deadline_s is None else time.monotonic() + limits.deadline_s
        self._n = 0

    def tick(self, rows: int = 1) -> None:
        self._n += rows
        if self._n >= CHECK_EVERY_ROWS:
            self._n = 0
            self.check()

    def check(self) -> None:
        reason = self.limits.stop() if self.limits.stop is not None else None
        if reason is None and self.deadline is not None and time.monotonic() > self.deadline:
            reason = f"it took over {self.limits.deadline_s:g} s{self.limits.hint('deadline_s')}"
        if reason:
            raise ReadStopped(f"{self.where}: reading stopped: {reason}")


def cut_text(text: str, n: int, how: str) -> str:
    """`text` cut to `n` characters, keeping the part the engine reads (`how`: head, head+tail, tail)."""
    if how == "tail":
        return text[-n:]
    if how == "head+tail":
        head = (n + 1) // 2
        return text[:head] + text[len(text) - (n - head):]
    return text[:n]


def cut_note(column, n: int) -> str:
    return f"column {str(column)!r} cut to {n} characters"
