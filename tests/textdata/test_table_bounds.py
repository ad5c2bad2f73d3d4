"""The shared reader (textdata/tables.py) as a careless user and an attacker feed it (issue 29): a row with a
field too many is never a shifted table, a million-comma row, a Parquet decompression bomb, endless lines,
a read that must stop."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from parquet_lie import lie

from textdata.errors import DataError
from textdata.table_limits import ReadStopped, TableLimitError, TableLimits, cut_text
from textdata.tables import check_encoding, iter_rows, iter_table, read_table

SHIFTED = "text,id\nhello, world,1\nsecond row,2\n"


@pytest.mark.parametrize("fmt, body, fields", [
    ("csv", SHIFTED, "3 fields, the header has 2"),
    ("tsv", "text\tid\nhello\tworld\t1\nsecond row\t2\n", "3 fields, the header has 2"),
])
def test_a_field_too_many_is_an_error_naming_file_row_and_line(tmp_path, fmt, body, fields):
    """pandas took the surplus field of the first row as an index: " world" and "2" were scored, exit 0."""
    path = tmp_path / f"in.{fmt}"
    path.write_text(body, encoding="utf-8")
    for read in (lambda: read_table(path), lambda: list(iter_table(path, 1)), lambda: read_table(path, ["text"])):
        with pytest.raises(DataError) as e:
            read()
        assert str(e.value).startswith(f"{path}: row 1 (line 2): {fields}") and "hello" in str(e.value)


def test_a_later_shifted_row_names_its_own_row_and_line(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text('text,label\n"a, quoted",x\n\nb,y\n"multi\nline",z\nc,d,e\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"row 4 \(line 7\): 3 fields"):
        read_table(path)


def test_flagged_rows_are_kept_with_their_reason_and_nothing_shifts(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(SHIFTED + "third,3\n", encoding="utf-8")
    chunks = list(iter_rows(path, 2, columns=["text"]))
    assert [len(c.frame) for c in chunks] == [2, 1] and list(chunks[1].frame.index) == [2]
    first = chunks[0]
    assert first.frame["text"].tolist() == ["hello", "second row"] and first.frame["id"].tolist() == [" world", "2"]
    assert list(first.errors) == [0] and first.errors[0].startswith("row 1 (line 2): 3 fields")
    assert not chunks[1].errors and chunks[1].frame["id"].tolist() == ["3"]


def test_fewer_fields_matter_only_where_a_needed_column_is_missing(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id,text,note\n1,hello\n2\n3,bye,x\n", encoding="utf-8")
    (chunk,) = iter_rows(path, 10, columns=["text"])
    assert chunk.frame.to_dict("records")[0] == {"id": "1", "text": "hello", "note": ""}
    assert list(chunk.errors) == [1] and "1 field, the header has 3: no 'text'" in chunk.errors[1]
    with pytest.raises(DataError, match=r"row 2 \(line 3\): 1 field"):
        read_table(path, columns=["text"])
    with pytest.raises(DataError, match=r"row 1 \(line 2\): 2 fields, the header has 3: no 'note'"):
        read_table(path)  # no columns named: every column is needed


def test_header_rules_as_pandas_had_them(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("\n,text,text\n0,a,b\n\n1,c,d\n", encoding="utf-8")
    df = read_table(path)
    assert list(df.columns) == ["Unnamed: 0", "text", "text.1"] and df["text.1"].tolist() == ["b", "d"]
    assert df["Unnamed: 0"].tolist() == ["0", "1"]  # strings stay strings
    (tmp_path / "empty.csv").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="the file is empty"):
        read_table(tmp_path / "empty.csv")


def test_a_quote_never_closed_is_an_error_not_a_swallowed_file(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text('text,label\n"open,x\nb,y\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 3: cannot parse as csv: unexpected end of data"):
        read_table(path)


def test_first_row_column_bomb_is_refused_while_reading(tmp_path):
    """'text\\na' + a million commas parsed for 18+ minutes and grew to 5 GB in pandas."""
    path = tmp_path / "bomb.csv"
    path.write_text("text\na" + "," * 1_000_000, encoding="utf-8")
    with pytest.raises(DataError, match=r"row 1 \(line 2\): 1000001 fields, the header has 1"):
        read_table(path)
    (chunk,) = iter_rows(path, 10)  # kept and flagged in a scoring run: one row, one column, not a million
    assert chunk.frame.shape == (1, 1) and list(chunk.errors) == [0]
    with pytest.raises(TableLimitError, match="line 2: a row of over 1000 characters"):
        read_table(path, limits=TableLimits(max_record_chars=1000))
    path.write_text(",".join(f"c{i}" for i in range(5000)) + "\n", encoding="utf-8")
    with pytest.raises(TableLimitError, match="5000 columns in the header; the limit is 4096"):
        read_table(path)


def test_a_read_stops_when_asked_or_late(tmp_path):
    path = tmp_path / "many.csv"
    path.write_text("text\n" + "row\n" * 5000, encoding="utf-8")
    asked = []

    def stop():
        asked.append(1)
        return "the server is shutting down" if len(asked) >= 3 else None

    with pytest.raises(ReadStopped, match="reading stopped: the server is shutting down"):
        read_table(path, limits=TableLimits(stop=stop))
    assert len(asked) == 3  # asked every few hundred rows, and the read ended at the third
    with pytest.raises(ReadStopped, match="took over 0 s"):
        read_table(path, limits=TableLimits(deadline_s=0))
    with pytest.raises(TableLimitError, match="over 100 rows"):
        read_table(path, limits=TableLimits(max_rows=100))


@pytest.mark.parametrize("how, kept", [("head", "abcd"), ("tail", "ghij"), ("head+tail", "abij")])
def test_overlong_cells_are_cut_and_flagged(tmp_path, how, kept):
    assert cut_text("abcdefghij", 4, how) == kept
    limits = TableLimits(max_cell_chars=4, cut=how)
    (tmp_path / "in.csv").write_text("text,n\nabcdefghij,1\nok,2\n", encoding="utf-8")
    (tmp_path / "in.jsonl").write_text('{"text": "abcdefghij", "n": 1}\n{"text": "ok", "n": 2}\n', encoding="utf-8")
    pd.DataFrame({"text": ["abcdefghij", "ok"], "n": [1, 2]}).to_parquet(tmp_path / "in.parquet")
    for name in ("in.csv", "in.jsonl", "in.parquet"):
        (chunk,) = iter_rows(tmp_path / name, 10, limits=limits)
        assert chunk.frame["text"].tolist() == [kept, "ok"], name
        assert chunk.notes == {0: "row 1 (line 2): column 'text' cut to 4 characters"} if name == "in.csv" else \
            list(chunk.notes) == [0] and "column 'text' cut to 4 characters" in chunk.notes[0], name
        assert not chunk.errors


def test_parquet_decompression_bomb(tmp_path):
    """40 cells of 5 million characters in 51 KB took 31 s and 3.4 GB; a repeated value stored once in a
    dictionary is worse. The metadata is checked before any page is read; dictionaries are cut once."""
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"text": ["x" * 2_000_000] * 4}), plain, compression="zstd", use_dictionary=False)
    assert plain.stat().st_size < 100_000
    with pytest.raises(TableLimitError, match=r"7.6 MB once decompressed; the limit is 1.0 MB"):
        read_table(plain, limits=TableLimits(max_bytes=1 << 20))
    with pytest.raises(TableLimitError, match="4 rows; the limit is 3"):
        read_table(plain, limits=TableLimits(max_rows=3))
    repeated = tmp_path / "dict.parquet"
    one_value = pa.DictionaryArray.from_arrays(pa.array([0] * 2000, pa.int32()), pa.array(["y" * 500_000]))
    pq.write_table(pa.table({"text": one_value, "n": list(range(2000))}), repeated, compression="zstd")
    assert repeated.stat().st_size < 100_000
    # 1 GB once decoded, under 1 MB of metadata-declared bytes: decoding it whole is what must not happen
    df = read_table(repeated, limits=TableLimits(max_cell_chars=1000, max_bytes=64 << 20))
    assert df.shape == (2000, 2) and df["text"].str.len().max() == 1000 and df["n"].tolist() == list(range(2000))
    with pytest.raises(TableLimitError, match="once decoded"):
        read_table(repeated, limits=TableLimits(max_cell_chars=None, max_batch_bytes=64 << 20))


def test_parquet_chunks_are_exact_across_row_groups(tmp_path):
    path = tmp_path / "groups.parquet"
    pq.write_table(pa.table({"text": [f"t{i}" for i in range(25)]}), path, row_group_size=7)
    chunks = list(iter_table(path, 10))
    assert [len(c) for c in chunks] == [10, 10, 5] and list(chunks[2].index) == list(range(20, 25))
    assert pd.concat(chunks)["text"].tolist() == [f"t{i}" for i in range(25)]


def test_jsonl_lines_that_are_not_objects(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "a"}\n[1, 2]\n\n{"text": "b"}\nnot json\n', encoding="utf-8")
    (chunk,) = iter_rows(path, 10)
    texts = chunk.frame["text"].tolist()
    assert len(texts) == 4 and texts[0] == "a" and texts[2] == "b"  # every line a row, in place
    assert sorted(chunk.errors) == [1, 3] and "not a JSON object (a list)" in chunk.errors[1]
    with pytest.raises(DataError, match=r"row 2 \(line 2\): not a JSON object"):
        read_table(path)


def test_encoding_errors_name_line_and_column_without_reading_a_line_whole(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b"text\nfine\n" + b"a" * 3000 + b"\xff\n")
    with pytest.raises(DataError, match=r"line 3 is not valid utf-8-sig \(bytes b'\\xff\\n' at column 3001\)"):
        check_encoding(path, "utf-8-sig", block=1024)  # the bad byte in the third block of one line
    path.write_bytes("text\n꿈".encode() + b"\xe1\n")
    with pytest.raises(DataError, match="line 2 is not valid utf-8"):
        check_encoding(path, "utf-8", block=7)  # a character split across blocks is not an error
    path.write_bytes("text\n꿈을 꿨다\n".encode())
    check_encoding(path, "utf-8", block=3)


def test_parquet_footer_that_understates_sizes_does_not_size_the_batches(tmp_path):
    """Issue 40: a 7 KB file whose footer said a few bytes reached 734 MB, the batch size taken from the
    footer. The page headers' sizes are what Arrow allocates: they bound the batches and `max_bytes`."""
    path = tmp_path / "liar.parquet"
    texts = ["x" * ((1 << 20) - 8) + f"{i:08d}" for i in range(40)]
    pq.write_table(pa.table({"text": texts}), path, compression="zstd", use_dictionary=False,
                   write_statistics=False, write_batch_size=4)  # a page every 4 rows (4 MB)
    group = pq.ParquetFile(path).metadata.row_group(0)
    assert group.total_byte_size == group.column(0).total_uncompressed_size  # so one rewrite changes both
    assert lie(path, group.total_byte_size, 400) == 2
    group = pq.ParquetFile(path).metadata.row_group(0)
    assert group.total_byte_size == group.column(0).total_uncompressed_size == 400 and path.stat().st_size < 50_000
    with pytest.raises(TableLimitError, match=r"liar.parquet: 40.\d MB once decompressed; the limit is 4.0 MB"):
        read_table(path, limits=TableLimits(max_bytes=4 << 20))
    # 40 MB of pages: read 7 rows at a time (8 MB batches), never as one 40 MB batch
    df = read_table(path, limits=TableLimits(max_cell_chars=1000, max_batch_bytes=8 << 20))
    assert df.shape == (40, 1) and df["text"].str.len().max() == 1000


def test_parquet_footer_placing_a_chunk_outside_the_file_is_refused(tmp_path):
    path = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"text": ["a" * 5000, "b"]}), path, compression="zstd", write_statistics=False)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert lie(path, chunk.total_compressed_size, 8000) and path.stat().st_size < 8000
    with pytest.raises(DataError, match=r"outside.parquet: row group 0, column 'text': the footer places it at bytes "
                                        r"\d+-\d+ of a \d+-byte file"):
        read_table(path)
