"""The review queue (`python -m app --review-queue`): texts the API answered "not sure" (under the served
threshold, calibration.json), kept for a person to label in the UI's Label tab.

Off by default: it stores texts that users sent. A server keeps it in the label store (app/labeling/kept_store.py,
which imports an older version's file once); alone, it is kept in `<data-dir>/review/queue.jsonl`, a journal of
`add` and `take` lines replayed at start (compacted when it grows past twice the queue's size):
- bounded: at most `size` texts; a full queue drops its oldest text, it never refuses or holds a request;
- deduplicated: a text already waiting (whitespace collapsed) is not added again;
- `start_session` hands the waiting texts, with the model's suggestion, to a labeling session
  (app/labeling/sessions.py), whose decisions a retrain reads like any other session's (app/versions/trainset.py); a
  multi-label answer keeps its whole label set and is reviewed in a label-set session.
Appending a line is the only disk work on the request path (no fsync: a crash may lose the last few
texts of a queue, never a decision); a disk error is logged, never raised into a request.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.label_kinds import SINGLE
from app.monitoring.monitor import label_set
from serving.multilabel import decision_margin
from textdata.labels import LabelSpace
from textdata.tables import atomic_path

log = logging.getLogger("app")
QUEUE_FILE = "queue.jsonl"
SOURCE = "review queue"  # the labeling session's source name


def key(text: str) -> str:
    return " ".join(str(text).split())


@dataclass
class Waiting:
    """A queued text with the model's answer (what LabelSession.create reads: label, score, probabilities)."""

    text: str
    label: str
    score: float
    probabilities: dict
    version: str = ""
    ts: float = 0.0
    labels: list | None = None  # a multi-label answer: the label set served (maybe empty); None: single-label


class ReviewQueue:
    def __init__(self, folder: Path, size: int):
        if size < 1:
            raise ValueError("the review queue holds at least 1 text")
        self.path, self.size = Path(folder) / QUEUE_FILE, size
        self._items: OrderedDict[str, Waiting] = OrderedDict()
        self._lock = threading.Lock()
        self._lines = 0
        self.dropped = 0  # oldest texts dropped by a full queue since start
        self.kept = None  # app/labeling/kept_store.py KeptTexts once the server has a label store: rows, not the file
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._replay()

    def __len__(self) -> int:
        return len(self._items)

    def _replay(self) -> None:
        if not self.path.exists():
            return
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(line)
                if event["op"] == "add":
                    self._insert(Waiting(**event["item"]))
                elif event["op"] == "take":
                    for k in event["keys"]:
                        self._items.pop(k, None)
            except (ValueError, KeyError, TypeError):
                continue  # a line torn by a crash: that text was never fully queued
            self._lines += 1

    def _insert(self, item: Waiting) -> bool:
        k = key(item.text)
        if k in self._items:
            return False
        self._items[k] = item
        while len(self._items) > self.size:
            self._items.popitem(last=False)
            self.dropped += 1
        return True

    def _write(self, event: dict) -> None:
        if self.kept is not None:  # the store's thread writes it, after the request (app/labeling/kept_store.py)
            if event["op"] == "add":
                self.kept.put_texts([(key(event["item"]["text"]), event["item"])], keep=self.size)
            else:
                self.kept.drop_texts(event["keys"])
            return
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(event, ensure_ascii=False) + "\n")
            self._lines += 1
            if self._lines > 2 * self.size + 16:
                self._compact()
        except OSError as e:
            log.warning("review queue: cannot write %s: %s", self.path, e)

    def _compact(self) -> None:
        with atomic_path(self.path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.writelines(
                json.dumps({"op": "add", "item": item.__dict__}, ensure_ascii=False) + "\n"
                for item in self._items.values()
            )
        self._lines = len(self._items)

    def add(self, texts: list[str], predictions: list, version: str) -> int:
        """Queue the texts whose prediction is not confident; returns how many were new."""
        added = 0
        now = round(time.time(), 3)
        with self._lock:
            for text, pred in zip(texts, predictions):
                if pred.confident:
                    continue
                answered = label_set(pred)  # a multi-label answer is its whole set, every label's score kept
                scores = pred.probabilities if answered is None else pred.scores
                item = Waiting(
                    text,
                    pred.label,
                    round(float(pred.score), 6),
                    {k: round(float(v), 6) for k, v in scores.items()},
                    version,
                    now,
                    None if answered is None else list(answered),
                )
                if self._insert(item):
                    self._write({"op": "add", "item": item.__dict__})
                    added += 1
        return added

    def peek(self) -> list[Waiting]:
        with self._lock:
            return list(self._items.values())

    def discard(self, texts: list[str]) -> None:
        """Take these texts out of the queue (they went to a labeling session)."""
        keys = [key(t) for t in texts]
        with self._lock:
            for k in keys:
                self._items.pop(k, None)
            if keys:
                self._write({"op": "take", "keys": keys})


@dataclass(frozen=True)
class _SetAnswer:
    """A queued multi-label answer as LabelSession.create reads one for a label-set session (app/labeling/sessions.py)."""

    label: str  # the served set, joined by the session's separator
    score: float  # how far its least certain label is from its threshold: least confident first
    probabilities: dict


def start_session(queue: ReviewQueue, store, labels: list[str], thresholds=None, space: LabelSpace = SINGLE):
    """A labeling session (app/labeling/sessions.py) holding the waiting texts with the model's suggestion, least
    confident first; None when the queue is empty. `space` (and `thresholds`): the served model's. A session
    holds answers of one kind, the served model's first (as the audit's, app/labeling/audit.py): a multi-label answer
    opens a label-set session with the served set pre-ticked, so accepting it records the whole set, not its
    top label (issue 40, M6)."""
    items = queue.peek()
    served_kind = [i for i in items if (i.labels is not None) == space.multi_label]
    items = served_kind or items
    first_kind = [i for i in items if (i.labels is not None) == (items[0].labels is not None)]
    if not first_kind:
        return None
    answered = LabelSpace.of(labels, first_kind[0].labels is not None, space.sep)  # the kind of these answers
    session = answered.pick(_label_session, _set_session)(store, first_kind, labels, thresholds, answered)
    queue.discard([i.text for i in first_kind])  # only once the session holds them: a failed start loses no text
    return session


def _label_session(store, items: list[Waiting], labels: list[str], thresholds, space: LabelSpace):
    names = [*labels, *sorted({i.label for i in items} - set(labels))]  # a label of another version stays decidable
    return store.create(SOURCE, [i.text for i in items], items, names)


def _set_session(store, items: list[Waiting], labels: list[str], thresholds, space: LabelSpace):
    sep = space.sep
    names = [*labels, *sorted({x for i in items for x in i.labels if sep not in x} - set(labels))]
    probs = np.array([[i.probabilities.get(n, 0.0) for n in labels] for i in items]).reshape(len(items), -1)
    margin = (decision_margin(probs, np.asarray(thresholds, np.float64))
              if thresholds is not None and len(thresholds) == len(labels) else [i.score for i in items])
    answers = [_SetAnswer(sep.join(n for n in names if n in i.labels), float(m), i.probabilities)
               for i, m in zip(items, margin)]
    return store.create(SOURCE, [i.text for i in items], answers, names, space=space)
