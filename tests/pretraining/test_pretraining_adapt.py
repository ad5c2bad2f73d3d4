"""Vocabulary sized to the corpus, --init-from (task-adaptive pretraining), tables as corpus files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from pretraining.config import UsageError, build_parser, config_from_args
from pretraining.corpus import Blocks, build_cache, corpus_as_text
from pretraining.tokenizer import load_tokenizer, resolve_vocab_size, vocab_size_for
from pretraining.train import train


def test_vocab_size_follows_the_corpus_size():
    assert vocab_size_for(1_085_948) == 4096  # the 1.1 MB Korean corpus
    assert vocab_size_for(2_200_000) == 8192
    assert vocab_size_for(4_200_000) == 16384
    assert vocab_size_for(10) == 4096 and vocab_size_for(10**11) == 32768
    sizes = [vocab_size_for(n) for n in np.geomspace(1e3, 1e10, 60).astype(int)]
    assert sizes == sorted(sizes) and all(s & (s - 1) == 0 for s in sizes)  # powers of two, never shrinking


def test_auto_vocab_reads_the_corpus_and_an_explicit_size_wins(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("가나다라\n" * 300_000, encoding="utf-8")  # 13 bytes a line -> 3.9 MB
    assert resolve_vocab_size(None, [corpus]) == resolve_vocab_size("auto", [corpus]) == 8192
    assert resolve_vocab_size(3000, [corpus]) == 3000
    with pytest.raises(UsageError, match="number or 'auto'"):
        resolve_vocab_size("big", [corpus])
    parser = build_parser("x")
    assert config_from_args(parser.parse_args(["--corpus", "c", "--output", "o"])).vocab_size is None
    assert config_from_args(parser.parse_args(["--corpus", "c", "--output", "o", "--vocab-size", "auto"])).vocab_size is None
    assert config_from_args(parser.parse_args(["--corpus", "c", "--output", "o", "--vocab-size", "8000"])).vocab_size == 8000


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def test_init_from_a_run_continues_its_weights(make_config, tmp_path):
    source = train(make_config(output=str(tmp_path / "source"), max_steps=6))
    # lr 0: the continued run must export exactly the weights it loaded (AdamW with lr 0 moves nothing).
    adapted = train(make_config(output=str(tmp_path / "adapted"), tokenizer=None, init_from=str(source),
                                lr=0.0, max_steps=2, hidden_size=64, num_attention_heads=4))
    for part in ("discriminator", "generator"):
        a, b = weights(source / part), weights(adapted / part)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), part
    record = json.loads((adapted / "config.json").read_text())
    assert record["hidden_size"] == 32  # the folder's shape wins over the flags
    assert record["initialized_from"] == {"discriminator": str(source / "discriminator"),
                                          "generator": str(source / "generator")}
    # and with a learning rate it does move
    moved = train(make_config(output=str(tmp_path / "moved"), tokenizer=None, init_from=str(source), max_steps=2))
    a, b = weights(source / "discriminator"), weights(moved / "discriminator")
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_init_from_a_bare_discriminator_gets_a_fresh_generator(make_config, tiny_electra_dir, tmp_path):
    out = train(make_config(output=str(tmp_path / "a"), tokenizer=None, init_from=str(tiny_electra_dir),
                            lr=0.0, max_steps=2))
    a, b = weights(tiny_electra_dir), weights(out / "discriminator")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((out / "config.json").read_text())["initialized_from"]["generator"] == "fresh"


def test_init_from_bad_folders(make_config, tmp_path, tiny_tokenizer_dir):
    with pytest.raises(UsageError, match="no config.json"):
        train(make_config(output=str(tmp_path / "a"), tokenizer=None, init_from=str(tiny_tokenizer_dir)))
    with pytest.raises(UsageError, match="own vocabulary"):
        make_config(init_from=str(tmp_path))


def test_a_table_corpus_gives_the_blocks_of_its_text_column(tmp_path, make_korean_lines, tiny_tokenizer_dir):
    lines = make_korean_lines(80)
    table = tmp_path / "notes.csv"
    pd.DataFrame({"id": range(80), "body": lines}).to_csv(table, index=False)
    text = tmp_path / "notes.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = load_tokenizer(tiny_tokenizer_dir)
    (converted,) = corpus_as_text([str(table)], "body", tmp_path / "corpus")
    a = Blocks(build_cache([converted], tok, 32, tmp_path / "c1"), seed=0)
    b = Blocks(build_cache([str(text)], tok, 32, tmp_path / "c2"), seed=0)
    assert len(a) == len(b) > 0 and np.array_equal(a.data, b.data)
    with pytest.raises(UsageError, match="no column 'text'.*body"):
        corpus_as_text([str(table)], "text", tmp_path / "corpus2")
