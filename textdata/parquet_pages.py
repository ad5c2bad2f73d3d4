"""The real sizes of a Parquet file's pages, read from the page headers rather than from the footer.

The footer's sizes are claims: a 7 KB file whose footer said its row group held a few bytes decoded to
734 MB, because the batch size was chosen from the footer. What Arrow actually allocates for a page is the
page header's `uncompressed_page_size` (it refuses a page that decompresses to anything else), and each
page must lie inside its column chunk, and each chunk inside the file. So before any page is
decompressed, every page header is read (a few bytes each, Thrift compact protocol: only the two sizes are
kept, the rest skipped) and the sizes a read will need are taken from them. Anything that does not add up
(a chunk outside the file, a page outside its chunk, a negative size, a header that does not parse) is
refused naming the file, the row group and the column.
"""

from __future__ import annotations

from pathlib import Path

from textdata.errors import DataError

HEADER_READ = 1 << 16  # bytes read to parse one page header (statistics can make it longer: read more then)
MAX_HEADER = 16 << 20  # a page header larger than this is not a page header


class _Short(Exception):
    """The header runs past the bytes read so far."""


class _Compact:
    """Just enough of Thrift's compact protocol to read a struct's integer fields and skip the others."""

    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise _Short
        self.pos += 1
        return self.buf[self.pos - 1]

    def varint(self) -> int:
        out = shift = 0
        for _ in range(10):
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
        raise ValueError("varint over 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > 32:
            raise ValueError("nested too deep")
        if kind in (1, 2):  # booleans carry their value in the type
            return
        if kind == 3:
            self.byte()
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.take(8)
        elif kind == 8:
            self.take(self.varint())
        elif kind in (9, 10):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            for _ in range(size):
                self.skip(head & 0x0F, depth + 1)
        elif kind == 11:
            size = self.varint()
            types = self.byte() if size else 0
            for _ in range(size):
                self.skip(types >> 4, depth + 1)
                self.skip(types & 0x0F, depth + 1)
        elif kind == 12:
            self.struct(depth + 1)
        else:
            raise ValueError(f"unknown field type {kind}")

    def take(self, n: int) -> None:
        if n < 0:
            raise ValueError("negative length")
        if self.pos + n > len(self.buf):
            raise _Short
        self.pos += n

    def struct(self, depth: int = 0, keep: tuple[int, ...] = ()) -> dict[int, int]:
        """The struct's integer fields whose ids are in `keep`; every other field skipped."""
        fields, last = {}, 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self.zigzag()
            if last in keep and kind in (5, 6):
                fields[last] = self.zigzag()
            else:
                self.skip(kind, depth)


def _header(f, at: int, end: int) -> tuple[int, int, int]:
    """(header bytes, uncompressed size, compressed size) of the page header at `at`."""
    want = HEADER_READ
    while True:
        f.seek(at)
        buf = f.read(min(want, end - at))
        try:
            c = _Compact(buf)
            fields = c.struct(keep=(2, 3))
            return c.pos, fields.get(2, -1), fields.get(3, -1)
        except _Short:
            if len(buf) < want or want >= MAX_HEADER:
                raise ValueError("a page header runs past its column chunk") from None
            want *= 4


def chunk_pages(path: Path, meta) -> list[tuple[int, int]]:
    """Per row group: (the sum of its pages' uncompressed sizes, the largest page's), what decompressing it
    allocates, after checking that every chunk lies inside the file and every page inside its chunk."""
    size = path.stat().st_size
    out = []
    with open(path, "rb") as f:
        for g in range(meta.num_row_groups):
            group, total, largest = meta.row_group(g), 0, 0
            for c in range(group.num_columns):
                col = group.column(c)
                where = f"{path}: row group {g}, column {col.path_in_schema!r}"
                start = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset \
                    else col.data_page_offset
                end = start + col.total_compressed_size
                if start < 4 or col.total_compressed_size < 0 or end > size:
                    raise DataError(f"{where}: the footer places it at bytes {start}-{end} of a {size}-byte file; "
                                    "the file is damaged or crafted")
                pages = _walk(f, start, end, where)
                total, largest = total + sum(pages), max([largest, *pages])
            out.append((total, largest))
    return out


def _walk(f, start: int, end: int, where: str) -> list[int]:
    pages, at = [], start
    while at < end:
        try:
            head, raw, packed = _header(f, at, end)
        except ValueError as e:
            raise DataError(f"{where}: page header at byte {at} unreadable ({e}); the file is damaged or crafted"
                            ) from None
        if raw < 0 or packed < 0 or at + head + packed > end:
            raise DataError(f"{where}: the page at byte {at} claims {packed} bytes ({raw} decompressed), past its "
                            "column chunk; the file is damaged or crafted")
        pages.append(raw)
        at += head + packed
    return pages
