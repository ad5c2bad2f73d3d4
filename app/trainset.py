"""The table a retrain learns from, and the evaluation slice every version is scored on.

Rows come from the base table (`--train-data`, optional) and from every labeling session's decisions in
force (app/labeling.py `decisions`). One text labeled several times: the latest decision wins (session
decisions by their time, all of them after the base table), and texts that got different labels are
listed as conflicts. Texts are compared with their whitespace collapsed.

The evaluation slice: a text belongs to it when a hash of the text falls below `share` (fixed in the
registry's eval_slice.json at first use), so a text is in it or not forever, whichever session labeled
it, and no version ever trains on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from textdata.errors import DataError
from textdata.tables import missing_text, read_table, write_json

from .labeling import decisions, valid_session_id
from .lineage import key

log = logging.getLogger("app")
SLICE_FILE = "eval_slice.json"
MAX_CONFLICTS_SHOWN = 50


class TrainingDataError(DataError):
    """The table cannot train a classifier (empty, one class, a class smaller than the folds): says what to do."""


@dataclass
class TrainingSet:
    train: pd.DataFrame  # text, label
    eval: pd.DataFrame  # text, label: the evaluation slice
    conflicts: list[dict] = field(default_factory=list)
    n_conflicts: int = 0
    sources: dict = field(default_factory=dict)


def in_eval_slice(text: str, share: float) -> bool:
    digest = hashlib.sha256(("eval-slice:" + key(text)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def eval_share(models_dir: Path, share: float) -> float:
    """The slice's share as first fixed in this registry (a later flag cannot move texts in or out of it)."""
    path = Path(models_dir) / SLICE_FILE
    try:
        fixed = float(json.loads(path.read_text(encoding="utf-8"))["share"])
    except (OSError, ValueError, KeyError, TypeError):
        write_json(path, {"share": share, "rule": "sha256('eval-slice:' + text, whitespace collapsed) < share"})
        return share
    if abs(fixed - share) > 1e-12:
        log.warning("--eval-share %s ignored: this registry's evaluation slice was fixed at %s (%s)", share, fixed, path)
    return fixed


def _rows(label_root: Path, base: Path | None) -> tuple[list[dict], dict]:
    rows, sources = [], {"base_rows": 0, "sessions": 0, "session_decisions": 0}
    if base is not None:
        df = read_table(base, columns={"text": "--train-data (column text)", "label": "--train-data (column label)"})
        df = df[~missing_text(df["text"]) & ~missing_text(df["label"])]
        rows += [{"text": t, "label": str(lab).strip(), "ts": float("-inf"), "source": Path(base).name}
                 for t, lab in zip(df["text"], df["label"])]
        sources["base_rows"] = len(df)
    if label_root.is_dir():
        for folder in sorted(label_root.iterdir()):
            if not (valid_session_id(folder.name) and (folder / "journal.jsonl").exists()):
                continue
            found = decisions(folder)
            rows += [{**d, "source": f"session {folder.name}"} for d in found]
            sources["sessions"] += 1
            sources["session_decisions"] += len(found)
    return rows, sources


def build(label_root: Path, base: Path | None, share: float) -> TrainingSet:
    rows, sources = _rows(Path(label_root), base)
    latest: dict[str, dict] = {}
    seen: dict[str, list[dict]] = {}
    for _, r in sorted(enumerate(rows), key=lambda ir: (ir[1]["ts"], ir[0])):  # by time; ties in reading order
        k = key(r["text"])
        if not k:
            continue
        latest[k] = r
        seen.setdefault(k, []).append(r)
    conflicts = []
    for k, history in seen.items():
        if len({h["label"] for h in history}) > 1:
            conflicts.append({"text": k, "kept": latest[k]["label"],
                              "labels": [{"label": h["label"], "source": h["source"],
                                          "time": None if h["ts"] == float("-inf") else h["ts"]} for h in history]})
    table = pd.DataFrame([{"text": r["text"], "label": r["label"]} for r in latest.values()], columns=["text", "label"])
    held = table["text"].map(lambda t: in_eval_slice(t, share)).astype(bool)
    sources.update(rows=len(table), eval_rows=int(held.sum()), train_rows=int((~held).sum()))
    return TrainingSet(table[~held].reset_index(drop=True), table[held].reset_index(drop=True),
                       conflicts[:MAX_CONFLICTS_SHOWN], len(conflicts), sources)


def check(ts: TrainingSet, folds: int) -> None:
    """Refuse, before any training starts, a table k-fold cannot learn from; each message says what to do."""
    n, held = len(ts.train), len(ts.eval)
    if n == 0:
        where = f" (all {held} labeled texts fall in the evaluation slice)" if held else ""
        raise TrainingDataError(f"no labeled rows to train on{where}: label texts in the Label tab, or start the "
                                "server with --train-data FILE (a text,label table)")
    counts = ts.train["label"].value_counts()
    if len(counts) < 2:
        raise TrainingDataError(f"the training table has one class only ({counts.index[0]!r}, {n} rows): a "
                                "classifier needs at least 2; label texts of another class")
    small = counts[counts < folds]
    if len(small):
        listed = ", ".join(f"{lab!r} has {c} row{'s' if c != 1 else ''}" for lab, c in small.items())
        raise TrainingDataError(f"{listed} in the training table; {folds}-fold cross-validation needs at least "
                                f"{folds} rows of every class: label more of them, or train with fewer folds")
