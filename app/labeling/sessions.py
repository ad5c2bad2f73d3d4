"""Labeling sessions for the UI's Label tab: the queue, decisions, undo, all kept on disk.

A session is a folder under `<data-dir>/label/<id>/`:
- `items.parquet`: the uploaded texts with the model's suggestion and confidence;
- `meta.json`: source file name, labels, queue order;
- `journal.jsonl`: every action (label, skip, undo, new label, order), appended and fsynced as it
  happens, so a crash or a closed tab loses nothing; state is rebuilt by replaying it;
- `labeled.csv`: `text,label`, UTF-8, the format `finetune/kfold.py` reads, appended at each decision
  (rewritten only on undo) so it can be picked up at any moment.

A session started on a multi-label model (meta `multi_label`, `label_sep`, `thresholds`) decides label
sets: a journal `label` event carries `labels` (a list, possibly empty: "none of these") and `label`, the
names joined by the separator in the session's label order, which is what labeled.csv holds (the format of
`finetune/kfold.py --multi-label --label-sep`). The suggestion is the model's set over its thresholds, the
confidence how far the least certain label is from its threshold (serving/multilabel.py decision_margin).
A review of a multi-label run's suspects (app/labeling/review.py) is such a session too, without thresholds: its
suggestion is the run's suggested set and its confidence the run's quality score.
"""

from __future__ import annotations

import contextvars
import csv
import io
import json
import os
import re
import secrets
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

from app.label_kinds import SINGLE, kind_of, space_fields, space_from
from serving.multilabel import decision_margin
from textdata.labels import MAX_NAME_CHARS, LabelSpace, name_problem
from textdata.tables import atomic_path

ORDERS = ("least confident first", "most confident first", "file order", "random")
# Who acts: the Label tab sets it for each event (the signed-in user, or one-person mode's `local`: app/ui/page.py),
# and every journal line then names them beside its time ("by", "ts"). Unset: code acting, not a person.
ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("label_actor", default=None)
_SESSION_ID = re.compile(r"^[0-9a-f]{12}$")


class SessionError(ValueError):
    """Something the person can fix (a bad label name, an unknown session); shown in the UI."""


def valid_session_id(sid: str | None) -> bool:
    # The id comes from the browser: it must never be able to name a path outside the data folder.
    return isinstance(sid, str) and bool(_SESSION_ID.fullmatch(sid))  # match() with $ takes "id\n"


def _csv_line(text: str, label: str) -> str:
    buf = io.StringIO()
    # The csv module quotes "\n" but not a bare "\r" (not in the "\n" line terminator), and a reader
    # takes an unquoted "\r" as a line end: such rows are quoted whole.
    quoting = csv.QUOTE_ALL if "\r" in text or "\r" in label else csv.QUOTE_MINIMAL
    csv.writer(buf, lineterminator="\n", quoting=quoting).writerow([text, label])
    return buf.getvalue()


def read_journal(path: Path) -> list[dict]:
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line torn by a crash mid-write: the action never completed
    return events


def decisions(folder: Path) -> list[dict]:
    """A session's labels in force (undone ones taken back), oldest first: {text, label, ts}. Read-only, so a
    training job can read sessions that are being labeled (a half-written last line is skipped)."""
    texts = pd.read_parquet(folder / "items.parquet", columns=["text"])["text"].tolist()
    stack: list[dict] = []
    for e in read_journal(folder / "journal.jsonl"):
        if e.get("op") in ("label", "skip"):
            stack.append(e)
        elif e.get("op") == "undo" and stack:
            stack.pop()
    return [{"text": texts[e["row"]], "label": e["label"], "ts": e.get("ts", 0.0), "row": e["row"]} for e in stack
            if e["op"] == "label" and 0 <= e.get("row", -1) < len(texts)]


class LabelSession:
    def __init__(self, folder: Path):
        self.folder = folder
        self.lock = threading.RLock()
        self.meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        self.space = space_from(self.meta)  # the kind its decisions are, decided at creation
        self.kind = kind_of(self.space)
        items = pd.read_parquet(folder / "items.parquet")
        self.texts: list[str] = items["text"].tolist()
        self.suggestion: list[str] = items["suggestion"].tolist()
        self.confidence = items["confidence"].to_numpy(np.float64)
        self.probs: list[dict] = [json.loads(p) for p in items["probabilities"]]
        self._orders: dict[str, np.ndarray] = {}
        self._pin: int | None = None  # a row just undone is shown next, whatever the order says
        self._replay()
        self._rewrite_labeled()  # repairs a labeled.csv cut short by a crash between the two writes

    # ------------------------------------------------------------ creation and lookup
    @classmethod
    def create(cls, root: Path, source: str, texts: list[str], predictions: list, labels: list[str],
               thresholds=None, space: LabelSpace = SINGLE, blind: bool = False, columns: dict | None = None,
               **meta_fields) -> LabelSession:
        """`predictions`: engine Predictions for `texts` (label, score, probabilities); with `thresholds` (a
        multi-label model's, label order) MultiLabelPredictions. A multi-label `space`: the session decides label
        sets (joined by its separator; without `thresholds`: the predictions' label and score as given).
        `blind`: an audit session (app/labeling/audit.py), shown without the model's answer, in file order. `columns`
        (more per-row values) and `meta_fields` are kept for other kinds of session (app/labeling/review.py)."""
        sid = secrets.token_hex(6)
        folder = root / sid
        folder.mkdir(parents=True)
        if thresholds is None:
            items = {"suggestion": [p.label for p in predictions], "confidence": [p.score for p in predictions],
                     "probabilities": [json.dumps(p.probabilities) for p in predictions]}
        else:
            probs = np.array([[p.scores[lab] for lab in labels] for p in predictions]).reshape(len(texts), len(labels))
            items = {"suggestion": [space.sep.join(p.labels) for p in predictions],
                     "confidence": decision_margin(probs, np.asarray(thresholds, np.float64)),
                     "probabilities": [json.dumps(p.scores) for p in predictions]}
        pd.DataFrame({"text": texts, **items, **(columns or {})}).to_parquet(folder / "items.parquet", index=False)
        meta = {"id": sid, "source": Path(source).name, "created": time.time(), "labels": list(labels),
                "order": ORDERS[2] if blind else ORDERS[0], "rows": len(texts), **({"blind": True} if blind else {}),
                **meta_fields}
        meta.update(space_fields(space))  # decides label sets; a review's (app/labeling/review.py) without thresholds
        if thresholds is not None:
            meta["thresholds"] = [float(t) for t in thresholds]
        with atomic_path(folder / "meta.json") as tmp:
            tmp.write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")
        (folder / "journal.jsonl").touch()
        return cls(folder)

    @property
    def id(self) -> str:
        return self.meta["id"]

    @property
    def labeled_path(self) -> Path:
        return self.folder / "labeled.csv"

    @property
    def multi_label(self) -> bool:
        return self.space.multi_label

    def suggested_set(self, row: int) -> list[str]:
        """A multi-label session's suggestion for `row`: the model's labels over their thresholds."""
        return self.kind.names(self.suggestion[row])

    # ------------------------------------------------------------ journal
    def _replay(self) -> None:
        self.labels = list(self.meta["labels"])
        self.order = self.meta["order"]
        self.stack: list[dict] = []  # effective decisions, oldest first; undo pops
        for event in read_journal(self.folder / "journal.jsonl"):
            self._apply(event)
        self._status()

    def _apply(self, event: dict) -> None:
        op = event.get("op")
        if op in ("label", "skip"):
            self.stack.append(event)
        elif op == "undo" and self.stack:
            self.stack.pop()
        elif op == "add_label" and event["label"] not in self.labels:
            self.labels.append(event["label"])
        elif op == "order" and event["order"] in ORDERS:
            self.order = event["order"]

    def _status(self) -> None:
        """Per row: 0 to do, 1 skipped, 2 labeled (the latest effective decision wins)."""
        status = np.zeros(len(self.texts), np.int8)
        for e in self.stack:
            status[e["row"]] = 2 if e["op"] == "label" else 1
        self.status = status

    def _log(self, event: dict) -> None:
        event = {**event, "ts": round(time.time(), 3)}
        if ACTOR.get() is not None:
            event["by"] = ACTOR.get()
        path = self.folder / "journal.jsonl"
        with open(path, "a+b") as f:
            # A line torn by a crash has no newline: without one here, this event would join it and be
            # lost (skipped as unreadable) at the next replay.
            size = f.seek(0, os.SEEK_END)
            torn = size > 0 and f.seek(size - 1) >= 0 and f.read(1) != b"\n"
            f.write((("\n" if torn else "") + json.dumps(event, ensure_ascii=False) + "\n").encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        self._apply(event)

    def _rewrite_labeled(self) -> None:
        with atomic_path(self.labeled_path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(_csv_line("text", "label"))
            for e in self.stack:
                if e["op"] == "label":
                    f.write(_csv_line(self.texts[e["row"]], e["label"]))

    # ------------------------------------------------------------ the queue
    def _order(self) -> np.ndarray:
        if self.order not in self._orders:
            n = len(self.texts)
            if self.order == "least confident first":
                idx = np.argsort(self.confidence, kind="stable")
            elif self.order == "most confident first":
                idx = np.argsort(-self.confidence, kind="stable")
            elif self.order == "random":
                idx = np.random.default_rng(int(self.id, 16)).permutation(n)  # same order after a resume
            else:
                idx = np.arange(n)
            self._orders[self.order] = idx
        return self._orders[self.order]

    def current(self) -> int | None:
        """The row to show: the next undecided one in the chosen order, then the skipped ones."""
        with self.lock:
            if self._pin is not None and self.status[self._pin] != 2:
                return self._pin
            order = self._order()
            status = self.status[order]
            for wanted in (0, 1):
                hits = np.flatnonzero(status == wanted)
                if len(hits):
                    return int(order[hits[0]])
            return None

    def progress(self) -> dict:
        with self.lock:
            labeled = int((self.status == 2).sum())
            skipped = int((self.status == 1).sum())
            return {"total": len(self.texts), "labeled": labeled, "skipped": skipped,
                    "todo": len(self.texts) - labeled - skipped}

    # ------------------------------------------------------------ actions
    def decide(self, row: int, label: str | list[str]) -> bool:
        """Label `row`; False (and nothing written) when it is no longer the row on screen (double click).
        A multi-label session takes a list of labels (empty: none of these); one name means that one alone."""
        with self.lock:
            label, chosen, unknown = self.kind.decision(label, self.labels)  # a set: in the session's label order
            if unknown:
                raise SessionError(f"unknown label {unknown[0]!r}")
            if row != self.current():
                return False
            self._pin = None
            self._log({"op": "label", "row": row, "label": label, **({"labels": chosen} if chosen is not None else {}),
                       "suggested": self.suggestion[row], "confidence": round(float(self.confidence[row]), 6)})
            self.status[row] = 2
            with open(self.labeled_path, "a", encoding="utf-8", newline="") as f:
                f.write(_csv_line(self.texts[row], label))
                f.flush()
                os.fsync(f.fileno())
            return True

    def skip(self, row: int) -> bool:
        with self.lock:
            if row != self.current() or self.status[row] == 1:
                return False  # skipping the only skipped row left would loop on it
            self._pin = None
            self._log({"op": "skip", "row": row})
            self.status[row] = 1
            return True

    def undo(self) -> int | None:
        """Take back the latest decision; returns its row, which becomes the current one again."""
        with self.lock:
            if not self.stack:
                return None
            last = self.stack[-1]
            self._log({"op": "undo", "row": last["row"]})
            self._status()
            if last["op"] == "label":
                self._rewrite_labeled()
            self._pin = last["row"]
            return last["row"]

    def add_label(self, name: str) -> str:
        name = " ".join((name or "").split())
        if not name:
            raise SessionError("type a label name first")
        # the one label-name rule (textdata/labels.py), as k-fold, --train-data and review files apply it
        problem = name_problem(name, self.space.sep)
        if problem:
            raise SessionError(f"label {name[:MAX_NAME_CHARS]!r} {problem}")
        with self.lock:
            if name in self.labels:
                raise SessionError(f"{name!r} is already a label")
            self._log({"op": "add_label", "label": name})
            return name

    def set_order(self, order: str) -> None:
        if order not in ORDERS:
            raise SessionError(f"unknown order {order!r}")
        with self.lock:
            if order != self.order:
                self._log({"op": "order", "order": order})


class SessionStore:
    """Open sessions by id, one object per session so concurrent tabs share its lock."""

    def __init__(self, root: Path):
        self.root = root
        self._open: dict[str, LabelSession] = {}
        self._lock = threading.Lock()

    def get(self, sid: str | None) -> LabelSession | None:
        if not valid_session_id(sid):
            return None
        with self._lock:
            if sid not in self._open:
                folder = self.root / sid
                if not (folder / "meta.json").exists():
                    return None
                self._open[sid] = LabelSession(folder)
            return self._open[sid]

    def create(self, source: str, texts: list[str], predictions: list, labels: list[str], thresholds=None,
               space: LabelSpace = SINGLE, **kinds) -> LabelSession:
        session = LabelSession.create(self.root, source, texts, predictions, labels, thresholds, space, **kinds)
        with self._lock:
            self._open[session.id] = session
        return session

    def create_blind(self, source: str, texts: list[str], labels: list[str],
                     space: LabelSpace = SINGLE) -> LabelSession:
        """A session with no suggestions: the texts alone (the live audit). A multi-label `space`: it decides
        label sets, nothing ticked to start with."""
        none = [type("NoAnswer", (), {"label": "", "score": 0.0, "probabilities": {}})()] * len(texts)
        session = LabelSession.create(self.root, source, texts, none, labels, space=space, blind=True)
        with self._lock:
            self._open[session.id] = session
        return session

    def list(self) -> list[dict]:
        """Earlier sessions, newest first, for the resume menu."""
        out = []
        if self.root.exists():
            for meta in self.root.glob("*/meta.json"):
                try:
                    m = json.loads(meta.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError):
                    continue
                if valid_session_id(m.get("id")):
                    out.append(m)
        return sorted(out, key=lambda m: -m.get("created", 0))
