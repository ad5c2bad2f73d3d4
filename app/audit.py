"""The live audit: a random share of served texts (`--audit-rate`), kept bounded and deduplicated, labeled by
a person in a blind Label-tab session (the model's answer hidden, so the label is not anchored on it); the
labels give live precision per model version and per answered class, and go into retraining like any label.

Off by default: it keeps texts users sent. The queue is `<data-dir>/monitor/audit.json`; a sampled text
waits there until an audit session takes it; a session keeps each text's served answer in `audit.json`
in its folder, which is how the decisions are scored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import threading
import time
from collections import OrderedDict
from pathlib import Path

from textdata.tables import write_json

from .labeling import decisions

log = logging.getLogger("app")
AUDIT_FILE = "audit.json"  # in a blind session's folder: the served answer of each of its texts


def wilson(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion: honest at small n and near 0 or 1, where the normal
    approximation gives intervals outside [0, 1]."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


class AuditQueue:
    def __init__(self, folder: Path | None, rate: float, max_items: int = 2000, seed: int | None = None):
        if not 0 <= rate <= 1:
            raise ValueError(f"--audit-rate must be in [0, 1], got {rate}")
        self.folder, self.rate, self.max_items = folder, rate, max_items
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.items: OrderedDict[str, dict] = OrderedDict()  # text hash -> {text, version, answer, ts}
        self.seen: set[str] = set()  # every hash ever sampled: a text is audited once
        self._load()

    def _path(self) -> Path | None:
        return self.folder / "audit.json" if self.folder is not None else None

    def _load(self) -> None:
        path = self._path()
        if path is None or not path.is_file():
            return
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            log.warning("audit: %s unreadable; starting an empty queue", path.name)
            return
        for item in saved.get("items", []):
            self.items[item["hash"]] = item
        self.seen.update(saved.get("seen", []))

    def save(self) -> None:
        path = self._path()
        if path is None:
            return
        with self.lock:
            state = {"items": list(self.items.values()), "seen": sorted(self.seen)}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, state)

    def offer(self, version: str, texts: list[str], answers: list[list[str]]) -> int:
        """Sample each text with probability `rate`; returns how many were queued. O(1) per text; a full
        queue drops its oldest item, it never blocks."""
        if not self.rate:
            return 0
        added = 0
        with self.lock:
            for text, answer in zip(texts, answers):
                if self.rng.random() >= self.rate:
                    continue
                h = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]
                if h in self.seen:
                    continue
                self.seen.add(h)
                self.items[h] = {"hash": h, "text": text, "version": version, "answer": list(answer), "ts": time.time()}
                added += 1
                while len(self.items) > self.max_items:
                    self.items.popitem(last=False)
        return added

    def take(self, n: int) -> list[dict]:
        """Up to `n` queued items, oldest first, removed from the queue (an audit session holds them)."""
        with self.lock:
            keys = list(self.items)[:n]
            return [self.items.pop(k) for k in keys]

    def __len__(self) -> int:
        return len(self.items)


def start_session(store, queue: AuditQueue, labels: list[str], n: int = 50):
    """A blind labeling session of up to `n` queued texts, or None when the queue is empty."""
    items = queue.take(n)
    if not items:
        return None
    session = store.create_blind("live audit", [i["text"] for i in items], labels)
    write_json(session.folder / AUDIT_FILE, {"items": [{k: i[k] for k in ("text", "version", "answer")} for i in items]})
    queue.save()
    return session


def live_precision(label_root: Path) -> dict:
    """Per version: the audited answers a person has labeled, how many were right (the person's label is
    among the answered labels), overall and per answered class, with 95% Wilson intervals."""
    tally: dict[str, dict] = {}
    for folder in sorted(Path(label_root).glob("*/")) if Path(label_root).is_dir() else []:
        audit = folder / AUDIT_FILE
        if not audit.is_file():
            continue
        answer_of = {i["text"]: i for i in json.loads(audit.read_text(encoding="utf-8"))["items"]}
        for d in decisions(folder):
            item = answer_of.get(d["text"])
            if item is None:
                continue
            v = tally.setdefault(item["version"], {"n": 0, "correct": 0, "per_class": {}})
            right = d["label"] in item["answer"]
            v["n"] += 1
            v["correct"] += right
            for name in item["answer"]:
                c = v["per_class"].setdefault(name, {"n": 0, "correct": 0})
                c["n"] += 1
                c["correct"] += right
    out = {}
    for version, v in tally.items():
        out[version] = {"audited": v["n"], "precision": v["correct"] / v["n"], "interval": wilson(v["correct"], v["n"]),
                        "per_class": {k: {"audited": c["n"], "precision": c["correct"] / c["n"],
                                          "interval": wilson(c["correct"], c["n"])} for k, c in v["per_class"].items()}}
    return out
