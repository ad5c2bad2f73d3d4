"""Train a WordPiece vocabulary for ELECTRA and save it as a transformers ElectraTokenizerFast.

    python pretraining/tokenizer.py --corpus corpus.txt [more.txt.gz ...] --output tok/   # size from the corpus
    python pretraining/tokenizer.py --corpus corpus.txt --vocab-size 32000 --output tok/

Without --vocab-size (or with `auto`) the size follows the corpus: one entry per 256 bytes of text,
rounded down to a power of two, between 4,096 and 32,768 (`vocab_size_for`). On the 1.1 MB Korean
corpus a 32k request gives 22k entries whose median count is 1 (85% seen fewer than 5 times); 4,096
gives a median count of 18, so each embedding gets trained (docs/notes/log.md, "Vocabulary size on ko-text.txt").

Normalisation is NFC + lowercase, *without* BERT's accent stripping: stripping runs NFD and drops
combining marks, which decomposes every Hangul syllable into jamo (한 -> ㅎㅏㄴ). NFC first so that text
typed on macOS (NFD) tokenizes like everything else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":  # outside the project's venv: a one-line hint, not a traceback
    try:
        from pretraining.config import hint_on_missing_module
    except ModuleNotFoundError as e:
        sys.exit(f"error: {e}: activate the project's venv (source .venv/bin/activate) or install it: pip install -e .")
    sys.excepthook = hint_on_missing_module

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from pretraining.config import UsageError
from pretraining.corpus import check_corpus, iter_lines

# One vocabulary entry per this many bytes of corpus; the clamp keeps room for Hangul syllables and their
# ##-continuations at the bottom (a few thousand on 1 MB) and ELECTRA's 30k at the top.
BYTES_PER_ENTRY = 256
MIN_VOCAB, MAX_VOCAB = 4096, 32768

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
REQUIRED = {"pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}


def vocab_size_for(n_bytes: int) -> int:
    """The default WordPiece size for a corpus of `n_bytes` UTF-8 bytes: 1 MB -> 4,096, 8 MB and up -> 32,768."""
    target = max(1, int(n_bytes) // BYTES_PER_ENTRY)
    return min(MAX_VOCAB, max(MIN_VOCAB, 1 << (target.bit_length() - 1)))


def corpus_bytes(paths) -> int:
    """Bytes of text (uncompressed, so .gz files count what they hold)."""
    return sum(len(line.encode("utf-8")) + 1 for line in iter_lines(paths))


def resolve_vocab_size(requested: int | str | None, paths) -> int:
    """An explicit size wins; None or "auto" -> vocab_size_for(the corpus)."""
    if requested in (None, "auto"):
        return vocab_size_for(corpus_bytes(paths))
    try:
        size = int(requested)
    except ValueError:
        raise UsageError(f"--vocab-size must be a number or 'auto', not {requested!r}") from None
    if size < len(SPECIAL_TOKENS) + 1:
        raise UsageError(f"--vocab-size {size} is too small")
    return size


def train_tokenizer(corpus: list[str], vocab_size: int, output: str | Path, max_length: int = 512):
    from transformers import ElectraTokenizerFast

    check_corpus(corpus)
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([
        normalizers.NFC(),
        normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=True),
    ])
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                        continuing_subword_prefix="##", show_progress=False)
    tok.train_from_iterator((line for line in iter_lines(corpus) if line), trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    # do_lower_case/strip_accents must match the normaliser, or transformers rebuilds it on load.
    fast = ElectraTokenizerFast(tokenizer_object=tok, do_lower_case=True, strip_accents=False,
                                model_max_length=max_length, **REQUIRED, unk_token="[UNK]")
    Path(output).mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(output))
    return fast


def load_tokenizer(folder: str | Path):
    """A tokenizer folder, checked for the special tokens ELECTRA needs."""
    from transformers import AutoTokenizer

    if not Path(folder).is_dir():
        raise UsageError(f"tokenizer folder not found: {folder}")
    try:
        tok = AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:  # transformers raises many types for a folder that is not a tokenizer
        raise UsageError(f"cannot load a tokenizer from {folder}: {exc}") from exc
    vocab = tok.get_vocab()
    missing = [name for attr, name in REQUIRED.items()
               if getattr(tok, attr) is None or getattr(tok, attr) not in vocab]
    if missing:
        raise UsageError(f"tokenizer at {folder} lacks {', '.join(missing)} in its vocabulary; "
                         "ELECTRA needs [PAD], [CLS], [SEP] and [MASK]")
    return tok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--corpus", nargs="+", required=True)
    parser.add_argument("--vocab-size", default="auto", help="a number, or auto (default): sized to the corpus")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    try:
        check_corpus(args.corpus)
        tok = train_tokenizer(args.corpus, resolve_vocab_size(args.vocab_size, args.corpus), args.output)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"saved a {len(tok)}-token WordPiece vocabulary to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
