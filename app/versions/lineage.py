"""Which texts each version trained on, so that two versions are compared only on evaluation-slice rows that
neither trained on.

The app never trains on the slice (app/versions/trainset.py), but a version imported with `python -m app --model` was
trained elsewhere: in the tour, v1 (`finetune/kfold.py --final` on the file also given as --train-data) had
trained on 987 of the slice's 1,236 rows, and a challenger that had not lost to it 0.728 vs 0.919 (issue 31).

A version's training texts are kept as hashes in TEXTS_FILE (one per line: sha256 of the text with its
whitespace collapsed, as app/versions/trainset.py compares texts), written when the version is made:
- trained by the app: the job's training table (also kept whole as training/train.csv);
- imported: the table its training_config.json names (k-fold's --data, less the --holdout rows the final
  model never saw), when it is still there; version.json's `trained_on` records which file (path, sha256,
  rows) or why it is unknown. A version whose training texts are unknown is compared on every slice row, and
  the decision says so.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from textdata.model_files import TRAINING_CONFIG

if TYPE_CHECKING:
    import pandas as pd

# pandas (through textdata.tables) is imported where a table is read: app/versions/registry.py imports this module,
# and `python -m app --model typo` or `python -m app models list` must answer without loading it.

TEXTS_FILE = "training/texts.sha256"
BUILTIN_DATA = ("bbcnews",)  # finetune/kfold.py's built-in data sets: not a file we can read here


def key(text: str) -> str:
    """A text as app/versions/trainset.py compares texts: whitespace collapsed."""
    return " ".join(str(text).split())


def text_hash(text: str) -> str:
    return hashlib.sha256(key(text).encode("utf-8")).hexdigest()[:32]


def write_hashes(folder: Path, texts) -> int:
    hashes = sorted({text_hash(t) for t in texts})
    path = Path(folder) / TEXTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(h + "\n" for h in hashes), encoding="ascii")
    return len(hashes)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def imported_texts(folder: Path) -> tuple[list[str] | None, dict]:
    """(the texts a k-fold --final model in `folder` trained on, or None; the record for version.json)."""
    try:
        config = json.loads((folder / TRAINING_CONFIG).read_text(encoding="utf-8"))["config"]
        data, column = str(config["data"]), str(config.get("text_column", "text"))
    except (OSError, ValueError, KeyError, TypeError):
        return None, {"known": False, "why": "no training_config.json naming its training data (not a "
                                             "finetune/kfold.py --final model)"}
    if data in BUILTIN_DATA:
        return None, {"known": False, "data": data, "why": f"trained on the built-in data set {data!r}"}
    from textdata.tables import read_table

    path = Path(data)
    if not path.is_file():
        return None, {"known": False, "data": data, "why": f"its training data {data} is not there (any more)"}
    try:
        table = read_table(path, columns=[column], encoding=str(config.get("encoding", "utf-8")))
    except ValueError as e:
        return None, {"known": False, "data": data, "why": f"its training data cannot be read: {e}"}
    texts = table[column].astype(str).tolist()
    record = {"known": True, "data": str(path.resolve()), "sha256": _file_sha256(path), "rows": len(texts)}
    if float(config.get("holdout") or 0) > 0:  # the final model never saw those rows
        held = Path(str(config.get("output", ""))) / "holdout.csv"
        try:
            held_texts = read_table(held, columns=[column])[column].astype(str).tolist()
        except (OSError, ValueError):
            record["holdout"] = f"{held} not found: its rows are counted as trained on"
        else:
            left = Counter(map(key, held_texts))
            kept = []
            for t in texts:  # a text both in the holdout and among the training rows was trained on
                if left[key(t)]:
                    left[key(t)] -= 1
                else:
                    kept.append(t)
            record.update(holdout=str(held.resolve()), holdout_rows=len(texts) - len(kept))
            texts = kept
    return texts, record


def record_import(src: Path, stage: Path) -> dict:
    """Write TEXTS_FILE into an imported version being built; the record for its version.json."""
    if (src / TEXTS_FILE).is_file():  # a registry version copied as it is
        return {"known": True, "from": "the folder's own " + TEXTS_FILE}
    texts, record = imported_texts(src)
    if texts is not None:
        record["texts"] = write_hashes(stage, texts)
    return record


def trained_hashes(folder: Path) -> tuple[set[str] | None, str]:
    """(hashes of the texts the version in `folder` trained on, or None when unknown; why unknown)."""
    folder = Path(folder)
    try:
        return set((folder / TEXTS_FILE).read_text(encoding="ascii").split()), ""
    except OSError:
        pass
    from textdata.tables import read_table

    if (folder / "training" / "train.csv").is_file():  # a trained version from before TEXTS_FILE
        return {text_hash(t) for t in read_table(folder / "training" / "train.csv")["text"].astype(str)}, ""
    texts, record = imported_texts(folder)  # an imported version from before TEXTS_FILE
    return (None, record["why"]) if texts is None else ({text_hash(t) for t in texts}, "")


def shared_rows(table: pd.DataFrame, folders: dict[str, Path]) -> tuple[pd.DataFrame, dict]:
    """The rows of `table` (text, label) that no version in `folders` ({name: folder}) trained on, and how the
    comparison was made: {"rows", "slice_rows", "left_out": {name: rows it trained on}, "unknown": {name: why}}."""
    hashes = table["text"].astype(str).map(text_hash)
    keep = hashes.map(lambda _: True)
    left_out, unknown = {}, {}
    for name, folder in folders.items():
        trained, why = trained_hashes(folder)
        if trained is None:
            unknown[name] = why
            continue
        seen = hashes.isin(trained)
        if seen.any():
            left_out[name] = int(seen.sum())
        keep &= ~seen
    basis = {"rows": int(keep.sum()), "slice_rows": len(table), "left_out": left_out, "unknown": unknown}
    return table[keep].reset_index(drop=True), basis


def describe(basis: dict | None) -> str:
    """How many rows a comparison rests on, and which were left out, in words for the decision."""
    if not basis:
        return ""
    out = f"on {basis['rows']} of {basis['slice_rows']} evaluation-slice rows"
    if basis.get("left_out"):
        out += " (left out, trained on: " + ", ".join(f"{n} {k}" for n, k in basis["left_out"].items()) + ")"
    if basis.get("unknown"):
        out += "; " + "; ".join(f"{n} may have trained on some of them: {why}" for n, why in basis["unknown"].items())
    return out
