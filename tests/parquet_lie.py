"""Parquet files whose footer lies about sizes (issue 40): the test files for every Parquet reader."""

from __future__ import annotations


def padded_varint(n: int, length: int) -> bytes:
    """`n` as a Thrift varint of exactly `length` bytes (readers accept the non-minimal form)."""
    out = [(n >> (7 * i)) & 0x7F | (0x80 if i < length - 1 else 0) for i in range(length)]
    assert n >> (7 * length) == 0
    return bytes(out)


def lie(path, true_value: int, said: int) -> int:
    """Rewrite every footer integer equal to `true_value` as `said` (same byte length): a footer that lies."""
    data = bytearray(path.read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer_len
    zz = true_value << 1
    canon = padded_varint(zz, max(1, (zz.bit_length() + 6) // 7))
    footer = bytes(data[start:-8])
    found = footer.count(canon)
    data[start:-8] = footer.replace(canon, padded_varint(said << 1, len(canon)))
    path.write_bytes(bytes(data))
    return found
