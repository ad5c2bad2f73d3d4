"""On the first start with a label store (one without datasets), the Label tab's sessions already in
DATA_DIR/label become datasets: each session one dataset (overlap 1, named "session ID"), its rows the
records, its decisions in force (app/labeling/sessions.py `decisions`: undone ones taken back) the answers of the
built-in `local` user at their own times. Every row and decision is counted and the counts logged; a text
labeled twice in one session keeps its latest label (counted as `replaced`). The sessions stay as they were:
the Label tab and retrains still read them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from app.label_kinds import kind_of, space_from
from app.labeling.sessions import decisions, valid_session_id
from labelstore import queue, users

log = logging.getLogger("app")


def _session(folder: Path) -> tuple[dict, list[dict], list[tuple]]:
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    items = pd.read_parquet(folder / "items.parquet")
    kind = kind_of(space_from(meta))
    conf = items["confidence"] if "confidence" in items else [0.0] * len(items)
    sugg = items["suggestion"] if "suggestion" in items else [None] * len(items)
    rows = [{"text": t, "priority": float(c), "suggestion": None if s is None else {"label": s}}
            for t, c, s in zip(items["text"], conf, sugg)]
    found = [(d["text"], kind.store_value(d["label"]), float(d["ts"])) for d in decisions(folder)]
    return meta, rows, found


def import_sessions(engine, label_root: Path) -> dict:
    """Counts: sessions, rows, records, decisions, answers, replaced. Nothing when the store has datasets."""
    counts = {"sessions": 0, "rows": 0, "records": 0, "decisions": 0, "answers": 0, "replaced": 0}
    if queue.list_datasets(engine) or not Path(label_root).is_dir():
        return counts
    uid = users.builtin(engine, users.LOCAL)[0]
    for folder in sorted(Path(label_root).iterdir()):
        if not (valid_session_id(folder.name) and (folder / "journal.jsonl").exists()):
            continue
        meta, rows, found = _session(folder)
        kind = kind_of(space_from(meta))
        labels = list(dict.fromkeys([*meta.get("labels", []), *(
            x for _, v, _ in found for x in kind.store_names(v))]))  # a label added during the session too
        _, n_records, n_answers = queue.import_answered(engine, f"session {folder.name}", labels,
                                                        kind.space.multi_label, rows, uid, found)
        counts["sessions"] += 1
        counts["rows"] += len(rows)
        counts["records"] += n_records
        counts["decisions"] += len(found)
        counts["answers"] += n_answers
    counts["replaced"] = counts["decisions"] - counts["answers"]
    if counts["sessions"]:
        log.info("imported %d labeling sessions into the label store: %d rows (%d distinct texts), %d decisions "
                 "(%d answers; %d replaced by a later label of the same text)", counts["sessions"], counts["rows"],
                 counts["records"], counts["decisions"], counts["answers"], counts["replaced"],
                 extra={"fields": {"event": "label_import", **counts}})
    return counts
