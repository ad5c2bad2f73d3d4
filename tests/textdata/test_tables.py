"""Reading tables: every spelling of UTF-8 drops Excel's byte-order mark, in every text format and reader."""

from __future__ import annotations

import pytest

from textdata.errors import DataError
from textdata.tables import iter_table, read_encoding, read_table

SPELLINGS = ["utf-8", "UTF-8", "utf8", "UTF8", "utf_8", "U8", "utf-8-sig"]
BODIES = {
    "csv": "text,label\n꿈을 꿨다,dream\n",
    "tsv": "text\tlabel\n꿈을 꿨다\tdream\n",
    "jsonl": '{"text": "꿈을 꿨다", "label": "dream"}\n',
}


@pytest.mark.parametrize("fmt", sorted(BODIES))
@pytest.mark.parametrize("encoding", SPELLINGS)
def test_any_utf8_spelling_strips_the_byte_order_mark(tmp_path, fmt, encoding):
    path = tmp_path / f"bom.{fmt}"
    path.write_bytes(b"\xef\xbb\xbf" + BODIES[fmt].encode("utf-8"))
    df = read_table(path, columns=["text", "label"], encoding=encoding)
    assert list(df.columns) == ["text", "label"]
    assert df.to_dict("records") == [{"text": "꿈을 꿨다", "label": "dream"}]
    (chunk,) = list(iter_table(path, chunk_rows=10, columns=["text", "label"], encoding=encoding))
    assert list(chunk.columns) == ["text", "label"]


@pytest.mark.parametrize("encoding", SPELLINGS)
def test_header_only_file_keeps_its_column_names(tmp_path, encoding):
    path = tmp_path / "empty.csv"
    path.write_bytes(b"\xef\xbb\xbftext,label\n")
    (chunk,) = list(iter_table(path, chunk_rows=10, encoding=encoding))
    assert list(chunk.columns) == ["text", "label"] and len(chunk) == 0


def test_one_mapping_for_the_codec():
    assert {read_encoding(e) for e in SPELLINGS} == {"utf-8-sig"}
    assert read_encoding("cp949") == "cp949"


def test_unknown_encoding_is_a_user_error(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text\nx\n", encoding="utf-8")
    with pytest.raises(DataError, match="unknown encoding 'latin-99'"):
        read_table(path, encoding="latin-99")
