"""Parquet read within `TableLimits`: the metadata first, then batches sized by their decompressed bytes.

The decompressed sizes are the page headers' (textdata/parquet_pages.py), not only the footer's: a
footer that understates them does not make a batch larger.

A Parquet file is compressed, and a dictionary-encoded column stores a repeated value once: 51 KB held
40 cells of 5 million characters. Before any data page is read, the metadata must show at most
`max_columns` columns, `max_rows` rows and `max_bytes` uncompressed bytes; each row group is then read in
batches whose rows, at the group's average size, fit `max_batch_bytes`. String columns are read as
dictionaries, so a repeated value is cut once, and a batch's size once decoded is known (and checked)
before it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from textdata.errors import DataError
from textdata.parquet_pages import chunk_pages
from textdata.table_limits import TableLimitError, TableLimits, Watch, cut_note
from textdata.text_rows import Rows

MB = 1 << 20


def _mb(n: float) -> str:
    return f"{n / MB:.1f} MB"


def parquet_checked(path: Path, limits: TableLimits):
    """(pyarrow's footer bounds for this file, metadata, Arrow schema, per row group the page headers'
    (decompressed bytes, largest page)), after checking them against `limits`: nothing is decompressed yet.
    For every reader of a Parquet file from outside (this module, `--engine ray`)."""
    import pyarrow.parquet as pq

    size = path.stat().st_size
    # pyarrow's own bounds on the footer: no string in it is longer than the file, no list has more items
    thrift = {"thrift_string_size_limit": max(1024, min(100_000_000, size)),
              "thrift_container_size_limit": max(1024, min(1_000_000, size))}
    try:
        pf = pq.ParquetFile(path, **thrift)
        meta, schema = pf.metadata, pf.schema_arrow
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a file that is not Parquet
        raise DataError(f"{path}: cannot read as parquet: {str(e).strip().splitlines()[0] if str(e).strip() else e}"
                        ) from None
    real = chunk_pages(path, meta)  # the page headers' sizes: the footer's may lie
    _check_metadata(path, meta, limits, real)
    for g, (_, largest) in enumerate(real):
        if largest > limits.max_batch_bytes:
            raise TableLimitError(f"{path}: row group {g} has a page of {_mb(largest)} decompressed; a batch may "
                                  f"take {_mb(limits.max_batch_bytes)}")
    return thrift, meta, schema, real


def parquet_rows(path: Path, chunk_rows: int, limits: TableLimits) -> Iterator[Rows]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    thrift, meta, schema, real = parquet_checked(path, limits)
    # text and bytes columns are read as dictionaries: a repeated value is decoded (and counted) once
    texts = [f.name for f in schema if _is_text(f.type) or pa.types.is_binary(f.type) or pa.types.is_large_binary(
        f.type) or pa.types.is_dictionary(f.type) and _is_text(f.type.value_type)]
    pf = pq.ParquetFile(path, read_dictionary=texts, **thrift)
    watch, total, offset, pending = Watch(limits, path), 0, 0, []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows == 0:
            continue
        per_row = max(group.total_byte_size, real[g][0]) / group.num_rows
        if per_row > limits.max_batch_bytes:
            raise TableLimitError(f"{path}: row group {g} holds {_mb(per_row)} per row decompressed; a batch may "
                                  f"take {_mb(limits.max_batch_bytes)}")
        batch_rows = max(1, min(chunk_rows, int(limits.max_batch_bytes // max(per_row, 1))))
        for batch in pf.iter_batches(batch_size=batch_rows, row_groups=[g], use_threads=False):
            watch.check()
            table, notes = _bounded(path, pa.Table.from_batches([batch]), texts, limits)
            total += table.nbytes
            if limits.max_bytes is not None and total > limits.max_bytes:
                raise TableLimitError(f"{path}: over {_mb(limits.max_bytes)} once decompressed"
                                      f"{limits.hint('max_bytes')}")
            pending.append((table, notes))
            while sum(len(t) for t, _ in pending) >= chunk_rows:
                rows, pending = _take(pending, chunk_rows, offset)
                offset += len(rows.frame)
                yield rows
    if pending or offset == 0:
        yield _take(pending, None, offset)[0] if pending else Rows(_empty(schema, offset), {}, {})


def _is_text(t) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _check_metadata(path: Path, meta, limits: TableLimits, real: list[tuple[int, int]]) -> None:
    if meta.num_columns > limits.max_columns:
        raise TableLimitError(f"{path}: {meta.num_columns} columns; the limit is {limits.max_columns}"
                              f"{limits.hint('max_columns')}")
    if limits.max_rows is not None and meta.num_rows > limits.max_rows:
        raise TableLimitError(f"{path}: {meta.num_rows} rows; the limit is {limits.max_rows}{limits.hint('max_rows')}")
    size = sum(max(meta.row_group(g).total_byte_size, real[g][0]) for g in range(meta.num_row_groups))
    if limits.max_bytes is not None and size > limits.max_bytes:
        raise TableLimitError(f"{path}: {_mb(size)} once decompressed; the limit is {_mb(limits.max_bytes)}"
                              f"{limits.hint('max_bytes')}")


def _bounded(path: Path, table, texts: list[str], limits: TableLimits):
    """The batch with dictionary text columns cut (each distinct value once) and decoded, after checking the
    decoded size; and {row: note} for the rows cut."""
    import pyarrow as pa
    import pyarrow.compute as pc

    notes: dict[int, list[str]] = {}
    decoded = 0
    for name in texts:
        col = table.column(name).combine_chunks()
        dictionary, indices = (col.dictionary, col.indices) if pa.types.is_dictionary(col.type) else (col, None)
        if limits.max_cell_chars is not None and _is_text(dictionary.type):
            lengths = pc.utf8_length(dictionary)
            over = pc.greater(lengths, limits.max_cell_chars)
            if pc.any(over).as_py():
                long = pc.fill_null(over if indices is None else pc.take(over, indices), False)
                for row in pc.indices_nonzero(long).to_pylist():
                    notes.setdefault(row, []).append(cut_note(name, limits.max_cell_chars))
                dictionary = pc.if_else(over, _cut(dictionary, limits), dictionary)
        sizes = pc.binary_length(dictionary)
        decoded += (pc.sum(sizes if indices is None else pc.take(sizes, indices)).as_py() or 0)
        if decoded > limits.max_batch_bytes:
            raise TableLimitError(f"{path}: a batch of {len(table)} rows holds over {_mb(limits.max_batch_bytes)} of "
                                  "text once decoded")
        plain = dictionary if indices is None else pc.take(dictionary, indices)
        table = table.set_column(table.schema.get_field_index(name), name, plain)
    return table, {r: "; ".join(v) for r, v in notes.items()}


def _cut(values, limits: TableLimits):
    import pyarrow.compute as pc

    n = limits.max_cell_chars
    if limits.cut == "tail":
        return pc.utf8_slice_codeunits(values, -n)
    head = pc.utf8_slice_codeunits(values, 0, n if limits.cut == "head" else (n + 1) // 2)
    if limits.cut == "head":
        return head
    return pc.binary_join_element_wise(head, pc.utf8_slice_codeunits(values, -(n - (n + 1) // 2)), "")


def _take(pending: list, n: int | None, offset: int) -> tuple[Rows, list]:
    """The first `n` rows (all with None) of the pending batches as one chunk, and what is left."""
    import pyarrow as pa

    tables, notes, base = [], {}, 0
    rest = []
    for table, batch_notes in pending:
        room = len(table) if n is None else n - base
        if room <= 0:
            rest.append((table, batch_notes))
            continue
        head = table.slice(0, room)
        tables.append(head)
        notes.update({base + r: v for r, v in batch_notes.items() if r < room})
        if room < len(table):
            rest.append((table.slice(room), {r - room: v for r, v in batch_notes.items() if r >= room}))
        base += len(head)
    df = pa.concat_tables(tables).to_pandas()
    df.index = pd.RangeIndex(offset, offset + len(df))
    return Rows(df, {}, notes), rest


def _empty(schema, offset: int) -> pd.DataFrame:
    df = schema.empty_table().to_pandas()
    df.index = pd.RangeIndex(offset, offset)
    return df
