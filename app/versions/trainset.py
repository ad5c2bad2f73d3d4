"""The table a retrain learns from, and the evaluation slice every version is scored on.

Rows come from the base table (`--train-data`, optional) and from every labeling session's decisions in
force (app/labeling/sessions.py `decisions`). One text labeled several times: the latest decision wins (session
decisions by their time, all of them after the base table), and texts that got different labels are
listed as conflicts. Texts are compared with their whitespace collapsed. A Review-suspects session
(app/labeling/review.py) is a labeling session too: its decisions correct base rows the same way, and are counted
(`corrections`, `review_kept`) for the Train tab.

The active model's label space (textdata/labels.py, given as a value) reads every label cell; for a multi-label
one a cell is a set: names joined by the separator, empty for "none of these" (a real answer, kept); sets are
compared and written with their names sorted (app/label_kinds.py holds what differs per kind).

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

from app.label_kinds import SINGLE, kind_of
from app.labeling.sessions import decisions, valid_session_id
from app.versions.lineage import key
from textdata.errors import DataError, capped
from textdata.labels import LabelSpace, check_name
from textdata.tables import missing_text, read_table, write_json

log = logging.getLogger("app")
SLICE_FILE = "eval_slice.json"
REVIEW = "review"  # meta.json "kind" of a Review-suspects session
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


def canonical_set(cell, sep: str, where: str = "") -> str:
    """A multi-label cell as the table holds it: its names sorted, joined by `sep` ("" for none)."""
    return LabelSpace.of(multi_label=True, sep=sep).canonical(cell, where)


def _canonical(space: LabelSpace, cell, where: str) -> str:
    """A label cell as the table holds it, by the label space's parser and name rule (textdata/labels.py):
    a name the rule refuses stops the retrain here, naming the file or session and the row."""
    try:
        return space.canonical(cell, where)
    except DataError as e:
        raise TrainingDataError(str(e)) from None


def _store_label(space: LabelSpace, kind, record: dict) -> str:
    """A dataset's final label as a table cell, each of its names held to the one label-name rule like the other
    sources' (a dataset made before `POST /v1/datasets` checked its labels stops the retrain here, by name)."""
    where = f"dataset {record['dataset_id']} record {record['record_id']}"
    try:
        names = [check_name(n, where, space.sep) for n in kind.store_names(record["label"])]
    except DataError as e:
        raise TrainingDataError(f"{e}; fix or delete the dataset (DELETE /v1/datasets/{record['dataset_id']})") \
            from None
    return space.join(names)


def _store_rows(store, space: LabelSpace) -> tuple[list[dict], dict]:
    """The label store's final labels (adjudicated, else majority) as of its newest event, whose id goes into
    the version's lineage (`data.store_event`): labelstore.snapshot.labels_as_of rebuilds the same rows."""
    from labelstore.snapshot import labels_as_of, latest_event

    event = latest_event(store)
    kind = kind_of(space)
    found = kind.own(labels_as_of(store, event), lambda r: r["multi_label"])  # datasets of its kind
    rows = [{"text": r["text"], "label": _store_label(space, kind, r), "ts": r["ts"],
             "source": f"dataset {r['dataset_id']}"} for r in found]
    return rows, {"store_event": event, "store_labels": len(rows)}


def _rows(label_root: Path, base: Path | None, space: LabelSpace, store=None) -> tuple[list[dict], dict]:
    rows, sources = [], {"base_rows": 0, "sessions": 0, "session_decisions": 0}
    if base is not None:
        df = read_table(base, columns={"text": "--train-data (column text)", "label": "--train-data (column label)"})
        df = df[~missing_text(df["text"]) & kind_of(space).labeled(df["label"])]
        labels = [_canonical(space, c, f"{base} row {i + 2}, column 'label'") for i, c in zip(df.index, df["label"])]
        rows += [{"text": t, "label": lab, "ts": float("-inf"), "source": Path(base).name}
                 for t, lab in zip(df["text"], labels)]
        sources["base_rows"] = len(df)
    if label_root.is_dir():
        for folder in sorted(label_root.iterdir()):
            if not (valid_session_id(folder.name) and (folder / "journal.jsonl").exists()):
                continue
            found = decisions(folder)
            found = [{**d, "label": _canonical(space, d["label"], f"session {folder.name} row {d['row'] + 1}")}
                     for d in found]
            review = session_kind(folder) == REVIEW
            rows += [{**d, "source": f"session {folder.name}", "review": review} for d in found]
            sources["sessions"] += 1
            sources["session_decisions"] += len(found)
    if store is not None:
        found, counts = _store_rows(store, space)
        rows += found
        sources.update(counts)
    return rows, sources


def session_kind(folder: Path) -> str:
    """"review" for a Review-suspects session (app/labeling/review.py), "label" for the others."""
    try:
        return json.loads((folder / "meta.json").read_text(encoding="utf-8")).get("kind", "label")
    except (OSError, ValueError, AttributeError):
        return "label"


def review_counts(seen: dict[str, list[dict]]) -> dict:
    """Texts whose label in force comes from a review: `corrections` where it differs from the label the text
    had before any review (base table or a labeling session), `review_kept` where the review kept it."""
    corrections = kept = 0
    for history in seen.values():
        before = [h["label"] for h in history if not h.get("review")]
        if history[-1].get("review") and before:
            corrections += history[-1]["label"] != before[-1]
            kept += history[-1]["label"] == before[-1]
    return {"corrections": corrections, "review_kept": kept}


def build(label_root: Path, base: Path | None, share: float, space: LabelSpace = SINGLE, store=None) -> TrainingSet:
    """space: the active model's label space, which reads every label cell (a multi-label one: sets).
    store: the label store's engine (team datasets), read as of its newest event."""
    rows, sources = _rows(Path(label_root), base, space, store)
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
    sources.update(review_counts(seen))
    kept = list(latest.values())  # columns, not a list of dicts: pandas holds the GIL 6x longer over dicts
    table = pd.DataFrame({"text": [r["text"] for r in kept], "label": [r["label"] for r in kept]}, columns=["text", "label"])
    held = table["text"].map(lambda t: in_eval_slice(t, share)).astype(bool)
    sources.update(rows=len(table), eval_rows=int(held.sum()), train_rows=int((~held).sum()))
    return TrainingSet(table[~held].reset_index(drop=True), table[held].reset_index(drop=True),
                       conflicts[:MAX_CONFLICTS_SHOWN], len(conflicts), sources)


def check(ts: TrainingSet, folds: int, space: LabelSpace = SINGLE) -> None:
    """Refuse, before any training starts, a table k-fold cannot learn from; each message says what to do."""
    n, held = len(ts.train), len(ts.eval)
    if n == 0:
        where = f" (all {held} labeled texts fall in the evaluation slice)" if held else ""
        raise TrainingDataError(f"no labeled rows to train on{where}: label texts in the Label tab, or start the "
                                "server with --train-data FILE (a text,label table)")
    counts = kind_of(space).counts(ts.train["label"])  # a multi-label row counts once for each of its names
    problem = kind_of(space).check_counts(counts, n)
    if problem:
        raise TrainingDataError(problem)
    small = counts[counts < folds]
    if len(small):
        listed = capped(f"{lab!r} has {c} row{'s' if c != 1 else ''}" for lab, c in small.items())
        raise TrainingDataError(f"{listed} in the training table; {folds}-fold cross-validation needs at least "
                                f"{folds} rows of every class: label more of them, or train with fewer folds")
