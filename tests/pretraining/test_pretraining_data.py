"""Tokenizer (Hangul survives) and the block cache (framing, document breaks, .gz, seeded order)."""

from __future__ import annotations

import gzip
import unicodedata

import numpy as np
import pytest

from pretraining.config import UsageError
from pretraining.corpus import Blocks, build_cache
from pretraining.tokenizer import load_tokenizer, train_tokenizer

JAMO = [(0x1100, 0x11FF), (0x3130, 0x318F)]  # conjoining jamo, compatibility jamo


def has_jamo(text: str) -> bool:
    return any(lo <= ord(ch) <= hi for ch in text for lo, hi in JAMO)


@pytest.fixture(scope="module")
def trained_tokenizer(tmp_path_factory, make_korean_lines):
    corpus = tmp_path_factory.mktemp("tokcorpus") / "ko.txt"
    corpus.write_text("\n".join(make_korean_lines(400, seed=3) + ["회의 메모: 오늘 오류가 발생했다", "Dream Diary"]),
                      encoding="utf-8")
    folder = tmp_path_factory.mktemp("tok")
    train_tokenizer([str(corpus)], 400, folder)
    return load_tokenizer(folder)


def test_hangul_survives_the_tokenizer(trained_tokenizer):
    text = "회의 메모: 오늘 오류가 발생했다"
    tokens = trained_tokenizer.tokenize(text)
    assert not any(has_jamo(t) for t in tokens)
    assert "[UNK]" not in tokens
    decoded = trained_tokenizer.decode(trained_tokenizer(text)["input_ids"], skip_special_tokens=True)
    assert decoded.replace(" ", "") == text.replace(" ", "")  # WordPiece decoding spaces out punctuation
    # Text typed on macOS arrives decomposed (NFD = jamo); NFC in the normaliser recomposes it.
    nfd = unicodedata.normalize("NFD", text)
    assert has_jamo(nfd)
    assert trained_tokenizer(nfd)["input_ids"] == trained_tokenizer(text)["input_ids"]
    assert trained_tokenizer.tokenize("Dream Diary") == trained_tokenizer.tokenize("dream diary")


def test_bert_accent_stripping_would_have_broken_hangul(trained_tokenizer):
    """The control for the test above: BERT's uncased normaliser (strip_accents) turns syllables into jamo."""
    from tokenizers import normalizers

    bert = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    assert has_jamo(bert.normalize_str("회의"))
    ours = trained_tokenizer.backend_tokenizer.normalizer
    assert ours.normalize_str("회의") == "회의"


def test_blocks_are_framed_and_respect_document_breaks(tmp_path, tiny_tokenizer_dir):
    tok = load_tokenizer(tiny_tokenizer_dir)
    corpus = tmp_path / "c.txt"
    # Document 1: 3 lines; document 2: one short line. seq_len 16 -> 14 tokens of text per block.
    corpus.write_text("오늘 회의 시간\n내일 약속 메모 기록\n꿈 에서 봤다 일기 쓰기 좋은 날씨\n\n에러 발생\n", encoding="utf-8")
    blocks = Blocks(build_cache([str(corpus)], tok, 16, tmp_path / "cache"), seed=0)
    rows = np.asarray(blocks.data)
    doc1 = tok("오늘 회의 시간 내일 약속 메모 기록 꿈 에서 봤다 일기 쓰기 좋은 날씨", add_special_tokens=False)["input_ids"]
    doc2 = tok("에러 발생", add_special_tokens=False)["input_ids"]
    assert (rows[:, 0] == tok.cls_token_id).all()
    texts = []
    for row in rows:
        body = row[1:]
        end = np.flatnonzero(body == tok.sep_token_id)[0]
        assert (body[end + 1:] == tok.pad_token_id).all()
        texts.append(body[:end].tolist())
    # Document 2 starts its own block instead of continuing document 1's last one.
    assert texts[-1] == doc2
    assert [t for text in texts[:-1] for t in text] == doc1
    assert all(len(t) == 14 for t in texts[:-2])


def test_gz_corpus_gives_the_same_blocks(tmp_path, ko_corpus, tiny_tokenizer_dir):
    tok = load_tokenizer(tiny_tokenizer_dir)
    gz = tmp_path / "ko.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write(ko_corpus.read_text(encoding="utf-8"))
    plain = Blocks(build_cache([str(ko_corpus)], tok, 32, tmp_path / "a"), seed=0)
    zipped = Blocks(build_cache([str(gz)], tok, 32, tmp_path / "b"), seed=0)
    assert np.array_equal(np.asarray(plain.data), np.asarray(zipped.data))


def test_cache_is_reused_and_order_is_seeded(tmp_path, ko_corpus, tiny_tokenizer_dir):
    tok = load_tokenizer(tiny_tokenizer_dir)
    path = build_cache([str(ko_corpus)], tok, 32, tmp_path)
    mtime = path.stat().st_mtime_ns
    assert build_cache([str(ko_corpus)], tok, 32, tmp_path) == path and path.stat().st_mtime_ns == mtime
    assert build_cache([str(ko_corpus)], tok, 16, tmp_path) != path  # another seq_len, another cache

    a, b, c = Blocks(path, seed=1), Blocks(path, seed=1), Blocks(path, seed=2)
    n = len(a)
    assert np.array_equal(a.batch(5, 8), b.batch(5, 8))
    assert not np.array_equal(a.batch(0, n), c.batch(0, n))
    # One epoch visits every block once; the next epoch is a different permutation of the same blocks.
    epoch0, epoch1 = a.batch(0, n), a.batch(n, n)
    def as_set(rows):
        return {tuple(r.tolist()) for r in rows}

    assert as_set(epoch0) == as_set(np.asarray(a.data)) == as_set(epoch1)
    assert not np.array_equal(epoch0, epoch1)
    # A batch that crosses the epoch boundary is the tail of one and the head of the next.
    assert np.array_equal(a.batch(n - 2, 4), np.concatenate([epoch0[-2:], epoch1[:2]]))


def test_missing_special_tokens_are_reported(tmp_path):
    with pytest.raises(UsageError, match="tokenizer folder not found"):
        load_tokenizer(tmp_path / "nothing-here")
