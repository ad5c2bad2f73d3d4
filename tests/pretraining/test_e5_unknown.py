"""A vocabulary pruned to one corpus meets the texts of a later k-fold: what it cannot cut into pieces becomes
`<unk>`, and the k-fold report says how many tokens (and texts) did (issue 62, finetune/unknown_tokens.py).
The model is test_e5.py's tiny e5 file converted and pruned; the texts are the toy notes, Hangul it never kept."""

from __future__ import annotations

import pytest
from test_e5 import write_file

from finetune.config import config_from_json

KEPT_CORPUS = ["ab c", "c ab"]  # what the vocabulary is pruned to: no Hangul piece survives
NOT_TEXT = {"<s>", "</s>", "<pad>", "<mask>"}


@pytest.fixture(scope="module")
def pruned_dir(tmp_path_factory):
    from pretraining import e5, e5_prune

    root = tmp_path_factory.mktemp("e5-unk")
    write_file(root / "m.bin")
    full = e5.convert(root / "m.bin", root / "full")
    return e5_prune.prune(full, KEPT_CORPUS, root / "pruned", floor=1)


def expected(tok, texts, max_length):
    """Counted from the pieces' names, not their ids: (unknown tokens, text tokens, texts with one)."""
    pieces = [tok.convert_ids_to_tokens(tok(t, truncation=True, max_length=max_length)["input_ids"]) for t in texts]
    unknown = [sum(p == "<unk>" for p in row) for row in pieces]
    return sum(unknown), sum(sum(p not in NOT_TEXT for p in row) for row in pieces), sum(n > 0 for n in unknown)


def test_count_is_the_unknown_tokens_among_the_text_tokens(pruned_dir):
    from transformers import AutoTokenizer

    from finetune import unknown_tokens

    tok = AutoTokenizer.from_pretrained(pruned_dir)
    texts = ["ab c", "한국 ab", "b", "c"]  # ▁b, b, ▁한국 were pruned away; "ab c" and "c" are whole
    ids = tok(texts)["input_ids"]
    got = unknown_tokens.count(ids, tok)
    unk, of, with_unk = expected(tok, texts, 512)
    assert unk > 0 and with_unk == 2  # the corpus' own texts keep every piece
    assert got == {"token": "<unk>", "tokens": unk, "of_tokens": of, "texts": with_unk, "of_texts": 4,
                   "share": pytest.approx(unk / of)}
    assert unknown_tokens.count(tok(["ab c"])["input_ids"], tok)["tokens"] == 0
    assert unknown_tokens.warning(got) and unknown_tokens.warning({**got, "share": 0.001, "tokens": 1}) is None


def test_a_tokenizer_without_an_unknown_token_has_nothing_to_count():
    from finetune import unknown_tokens

    class ByteLevel:  # what a byte-level BPE tokenizer answers
        unk_token_id, unk_token, all_special_ids = None, None, [0, 1]

    assert unknown_tokens.count([[0, 5, 1]], ByteLevel()) is None
    assert "none to count" in unknown_tokens.line(None) and unknown_tokens.warning(None) is None


def test_kfold_reports_the_unknown_tokens_of_a_later_text(tmp_path, pruned_dir, toy_rows, capsys):
    from transformers import AutoTokenizer

    from finetune import kfold

    df = toy_rows(n_per_class=8, seed=3)
    df.loc[df.index[::2], "text"] = "ab c"  # half the rows the pruned vocabulary covers whole
    data = tmp_path / "notes.csv"
    df.to_csv(data, index=False)
    cfg = config_from_json({"model": str(pruned_dir), "data": str(data), "output": str(tmp_path / "run"),
                            "folds": 2, "max_length": 16, "holdout": 0.25, "group_column": "page", "blend": "off",
                            "label_issues": "off", "train": {"epochs": 1, "batch_size": 8, "patience": 0}})
    report = kfold.run(cfg)
    got = report["unknown_tokens"]
    tok = AutoTokenizer.from_pretrained(pruned_dir)
    unk, of, with_unk = expected(tok, df["text"].tolist(), 16)
    held = got["holdout"]
    assert got["of_texts"] + held["of_texts"] == len(df) and held["of_texts"] > 0  # fold rows, held-out rows
    assert (got["tokens"] + held["tokens"], got["of_tokens"] + held["of_tokens"]) == (unk, of)
    assert got["texts"] + held["texts"] == with_unk == len(df) - len(df.index[::2])  # every Hangul note, no other
    assert got["share"] == pytest.approx(got["tokens"] / got["of_tokens"])
    assert any("of the tokens are <unk>" in w for w in report["warnings"])
    out = capsys.readouterr().out
    assert f"unknown tokens (<unk>): {got['tokens']:,} of {got['of_tokens']:,} tokens" in out
