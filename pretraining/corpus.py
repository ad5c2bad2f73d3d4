"""Corpus files -> a memory-mapped cache of fixed-length token blocks, read in a seeded order.

Input: text files (`.gz` too), one paragraph a line, a blank line between documents; tables (`.csv`,
`.tsv`, `.jsonl`, `.parquet`) are first written out as such a file from their text column, one row a line. Lines of a
document are concatenated and cut into blocks of `[CLS] <seq_len - 2 tokens> [SEP]`; a document's last
block is padded rather than continued with the next document. Tokenizing happens once: the blocks are
written to `cache_dir/blocks-<key>.bin` (key = corpus files' paths, sizes and mtimes, the vocabulary and
seq_len) and memory-mapped afterwards, so a corpus larger than RAM works.

Order: the block at global position p is `permutation(seed, epoch)[p mod n]` with epoch = p div n, so
a run's data order is a function of (seed, position) and `--resume` only needs the position.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pretraining.config import UsageError


def _open(path: str):
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def check_corpus(paths) -> None:
    if not paths:
        raise UsageError("no corpus files given (--corpus FILE ...)")
    for path in paths:
        if not Path(path).is_file():
            raise UsageError(f"corpus file not found: {path}")
        with _open(path) as f:
            if not any(line.strip() for line in f):
                raise UsageError(f"corpus file is empty: {path}")


TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")


def table_as_text(path: str, text_column: str, folder: str | Path) -> str:
    """The text column of a table as a one-paragraph-a-line file in `folder` (rewritten only when the table
    is newer), so tables go through the same cache and block cutting as text files."""
    out = Path(folder) / (Path(path).name + ".txt")
    if out.exists() and out.stat().st_mtime_ns >= os.stat(path).st_mtime_ns:
        return str(out)
    import pandas as pd

    readers = {".csv": pd.read_csv, ".tsv": lambda p, **kw: pd.read_csv(p, sep="\t", **kw),
               ".jsonl": lambda p, **kw: pd.read_json(p, lines=True), ".parquet": pd.read_parquet}
    suffix = Path(path).suffix.lower()
    try:
        table = readers[suffix](path, **({} if suffix in (".jsonl", ".parquet") else {"dtype": str}))
    except Exception as exc:  # pandas raises many types for a malformed file
        raise UsageError(f"cannot read {path} as {suffix[1:]}: {exc}") from exc
    if text_column not in table.columns:
        raise UsageError(f"{path}: no column {text_column!r} (columns: {', '.join(map(str, table.columns))}); "
                         "choose one with --text-column")
    texts = [" ".join(str(t).split()) for t in table[text_column] if isinstance(t, str) and t.strip()]
    if not texts:
        raise UsageError(f"{path}: column {text_column!r} holds no text")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("\n".join(texts) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    return str(out)


def corpus_as_text(paths, text_column: str, folder: str | Path) -> tuple[str, ...]:
    """`paths` with every table replaced by its text file (see table_as_text)."""
    for path in paths:
        if not Path(path).is_file():
            raise UsageError(f"corpus file not found: {path}")
    return tuple(table_as_text(p, text_column, folder) if str(p).lower().endswith(TABLE_SUFFIXES) else str(p)
                 for p in paths)


def iter_lines(paths) -> Iterator[str]:
    """Stripped lines of all files; '' marks a document break (and the end of each file)."""
    for path in paths:
        with _open(path) as f:
            for line in f:
                yield line.strip()
        yield ""


def _write_blocks(paths, tokenizer, seq_len: int, out, dtype, batch_lines: int = 1000) -> int:
    cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    body = seq_len - 2
    buffer: list[int] = []
    n_blocks = 0

    def emit(tokens):
        nonlocal n_blocks
        block = [cls, *tokens, sep] + [pad] * (body - len(tokens))
        out.write(np.asarray(block, dtype=dtype).tobytes())
        n_blocks += 1

    def consume(lines):
        nonlocal buffer
        # verbose=False: lines longer than the model's max length are fine here, blocks cut them.
        encoded = tokenizer(lines, add_special_tokens=False, verbose=False)["input_ids"] if lines else []
        for line, ids in zip(lines, encoded):
            if line == "":  # document break
                if buffer:
                    emit(buffer)
                buffer = []
                continue
            buffer.extend(ids)
            while len(buffer) >= body:
                emit(buffer[:body])
                buffer = buffer[body:]

    pending: list[str] = []
    for line in iter_lines(paths):
        pending.append(line)
        if len(pending) >= batch_lines:
            consume(pending)
            pending = []
    consume(pending)
    if buffer:
        emit(buffer)
    return n_blocks


def cache_key(paths, tokenizer, seq_len: int) -> str:
    h = hashlib.sha256(f"v1 {seq_len}".encode())
    for path in paths:
        st = os.stat(path)
        h.update(f"{os.path.abspath(path)} {st.st_size} {st.st_mtime_ns}".encode())
    h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    return h.hexdigest()[:16]


def build_cache(paths, tokenizer, seq_len: int, cache_dir: str | Path) -> Path:
    """Tokenize once; returns the .bin path (with a .json beside it). Reuses an existing cache."""
    check_corpus(paths)
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    stem = cache_dir / f"blocks-{cache_key(paths, tokenizer, seq_len)}"
    bin_path, meta_path = stem.with_suffix(".bin"), stem.with_suffix(".json")
    if bin_path.exists() and meta_path.exists():
        return bin_path
    dtype = np.uint16 if len(tokenizer) <= np.iinfo(np.uint16).max + 1 else np.int32
    tmp = stem.with_suffix(".bin.tmp")
    with open(tmp, "wb") as out:
        n_blocks = _write_blocks(paths, tokenizer, seq_len, out, dtype)
    os.replace(tmp, bin_path)
    meta = {"n_blocks": n_blocks, "seq_len": seq_len, "dtype": np.dtype(dtype).name, "corpus": list(map(str, paths))}
    meta_path.write_text(json.dumps(meta, indent=1))
    return bin_path


class Blocks:
    """The cached blocks, memory-mapped, served by global sample position."""

    def __init__(self, bin_path: str | Path, seed: int):
        meta = json.loads(Path(bin_path).with_suffix(".json").read_text())
        self.n, self.seq_len, self.seed = meta["n_blocks"], meta["seq_len"], seed
        self.data = np.memmap(bin_path, dtype=meta["dtype"], mode="r", shape=(self.n, self.seq_len)) if self.n else None
        self._epoch, self._order = -1, None

    def __len__(self) -> int:
        return self.n

    def order(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._epoch, self._order = epoch, np.random.default_rng([self.seed, epoch]).permutation(self.n)
        return self._order

    def batch(self, position: int, size: int) -> np.ndarray:
        """Rows for global positions position .. position + size - 1, as int64 (size, seq_len)."""
        rows = [self.order(p // self.n)[p % self.n] for p in range(position, position + size)]
        return np.asarray(self.data[rows], dtype=np.int64)
