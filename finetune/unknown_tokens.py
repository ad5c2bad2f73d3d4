"""How many tokens the tokenizer had no piece for (its unknown token, `<unk>` / `[UNK]`) in the rows k-fold trains
and scores on: report.json's `unknown_tokens` and a line under the printed table (issue 62).

A vocabulary pruned to one corpus (pretraining/e5_prune.py, `pretraining/train.py --init-from e5-small`) cuts a
later text's missing pieces into smaller kept ones, and what no kept piece covers becomes the unknown token: the
model then sees one id for all of it, silently. Counting is `id == unk_token_id` over the ids the model is fed
(truncated to --max-length), so it costs nothing and holds for any tokenizer; one without an unknown token
(byte-level BPE) has nothing to count and reports None.
"""

from __future__ import annotations

# From this share of the texts' tokens on, the run warns: a few unknown emoji or rare symbols are normal for a
# WordPiece or unigram vocabulary; one token in a hundred means the vocabulary does not fit the texts.
WARN_SHARE = 0.01


def count(ids: list[list[int]], tokenizer) -> dict | None:
    """Unknown tokens among the text tokens of `ids` (special tokens such as <s> </s> [CLS] not counted as text),
    and how many texts hold one."""
    unk = tokenizer.unk_token_id
    if unk is None:
        return None
    special = set(tokenizer.all_special_ids) - {unk}
    tokens = unknown = texts = 0
    for row in ids:
        n = sum(1 for t in row if t == unk)
        tokens += sum(1 for t in row if t not in special)
        unknown += n
        texts += n > 0
    return {"token": tokenizer.unk_token, "tokens": unknown, "of_tokens": tokens, "texts": texts,
            "of_texts": len(ids), "share": unknown / tokens if tokens else 0.0}


def entry(ids: list[list[int]], tokenizer, held_ids: list[list[int]] | None = None) -> dict | None:
    """report.json's `unknown_tokens`: over the fold rows, and the --holdout rows' own count under `holdout`."""
    rows = count(ids, tokenizer)
    if rows is not None and held_ids is not None:
        rows["holdout"] = count(held_ids, tokenizer)
    return rows


def _said(c: dict) -> str:
    return (f"{c['tokens']:,} of {c['of_tokens']:,} tokens ({c['share']:.2%}) in {c['texts']:,} of "
            f"{c['of_texts']:,} texts")


def line(e: dict | None) -> str:
    if e is None:
        return "unknown tokens: none to count (the tokenizer has no unknown token)"
    held = f"; holdout {_said(e['holdout'])}" if e.get("holdout") else ""
    return f"unknown tokens ({e['token']}): {_said(e)}{held}"


def warning(e: dict | None) -> str | None:
    if e is None or e["share"] < WARN_SHARE:
        return None
    return (f"{e['share']:.1%} of the tokens are {e['token']} ({e['tokens']:,} in {e['texts']:,} of {e['of_texts']:,} "
            "texts): the tokenizer's vocabulary lacks pieces these texts need, and the model sees one id for all of "
            "them; a vocabulary pruned to another corpus? prune it with these texts too (pretraining/e5_prune.py "
            "--corpus) or start from the unpruned model")
