"""The live audit: a random share of served texts (`--audit-rate`), kept bounded and deduplicated, labeled by
a person in a blind Label-tab session (the model's answer hidden, so the label is not anchored on it); the
labels give live precision per model version, and go into retraining like any label.

Off by default: it keeps texts users sent. A server keeps the queue in the label store (app/labeling/kept_store.py,
which imports an older version's file once); alone, it is `<data-dir>/monitor/audit.json`; a sampled text
waits there until an audit session takes it (at most 2,000 wait; a full queue drops its oldest), and is not
sampled again while its hash is among the last 20,000 sampled (older hashes are forgotten: the file stays
bounded); a session keeps each text's served answer in `audit.json`
in its folder, which is how the decisions are scored.

Each queued text keeps its answer's kind (`multi_label`; items saved before it existed are single-label).
A single-label answer is scored by the person's one label: right when it is among the answered ones, overall
and per answered class. A multi-label answer is a label set, maybe empty: its audit session is a multi-label one (the
person ticks every label that applies, none allowed, still without the model's answer), and the sets are
compared: micro precision of the asserted labels (asserted and ticked / asserted), micro recall (ticked and
asserted / ticked), the exact-set rate, and per label its precision and recall. A session holds one kind:
the served version's kind first, then what is left of the other (a swap between kinds leaves both queued).
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

from app.label_kinds import SINGLE, kind_of, space_from
from app.labeling.sessions import decisions
from textdata.labels import LabelSpace
from textdata.tables import write_json

log = logging.getLogger("app")
AUDIT_FILE = "audit.json"  # in a blind session's folder: the served answer of each of its texts
AUDIT_SOURCE = "live audit"  # an audit session's source name
SEEN_PER_ITEM = 10  # sampled texts remembered (not audited twice) per text the queue holds


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
    def __init__(self, folder: Path | None, rate: float, max_items: int = 2000, seed: int | None = None,
                 max_seen: int = SEEN_PER_ITEM * 2000):
        if not 0 <= rate <= 1:
            raise ValueError(f"--audit-rate must be in [0, 1], got {rate}")
        self.folder, self.rate, self.max_items, self.max_seen = folder, rate, max_items, max_seen
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.items: OrderedDict[str, dict] = OrderedDict()  # text hash -> {text, version, answer, multi_label, ts}
        # The hashes of the last `max_seen` texts sampled, oldest first: a text is audited once within that
        # window. Every hash ever sampled once grew without bound (~20 B a text, the file rewritten every 30 s).
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.kept = None  # app/labeling/kept_store.py (items, seen) once the server has a label store: rows, not the file
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
        for h in saved.get("seen", [])[-self.max_seen:]:
            self.seen[h] = None

    def save(self) -> None:
        path = self._path()
        if path is None or self.kept is not None:  # in the store, each change is written as it happens
            return
        with self.lock:
            state = {"items": list(self.items.values()), "seen": list(self.seen)}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, state)

    def offer(self, version: str, texts: list[str], answers: list[list[str]], multi_label: bool = False) -> int:
        """Sample each text with probability `rate`; returns how many were queued. O(1) per text; a full
        queue drops its oldest item, it never blocks. `multi_label`: each answer is a label set (maybe empty)."""
        if not self.rate:
            return 0
        added, new = 0, []
        with self.lock:
            for text, answer in zip(texts, answers):
                if self.rng.random() >= self.rate:
                    continue
                h = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]
                if h in self.seen:
                    continue
                self.seen[h] = None
                if len(self.seen) > self.max_seen:
                    self.seen.popitem(last=False)
                self.items[h] = {"hash": h, "text": text, "version": version, "answer": list(answer),
                                 "multi_label": bool(multi_label), "ts": time.time()}
                new.append(h)
                added += 1
                while len(self.items) > self.max_items:
                    self.items.popitem(last=False)
            rows = [(h, self.items[h]) for h in new if h in self.items]
        if self.kept is not None and new:
            self.kept[0].put(rows, keep=self.max_items)
            self.kept[1].put([(h, None) for h in new], keep=self.max_seen)
        return added

    def take(self, n: int, sets: bool | None = None) -> list[dict]:
        """Up to `n` queued items, oldest first, removed from the queue (an audit session holds them); with
        `sets`, only the items whose answers are (True) or are not (False) label sets."""
        with self.lock:
            keys = [k for k, i in self.items.items() if sets is None or is_set(i) == sets][:n]
            taken = [self.items.pop(k) for k in keys]
        if self.kept is not None and keys:
            self.kept[0].drop(keys)
        return taken

    def __len__(self) -> int:
        return len(self.items)


def is_set(item: dict) -> bool:
    """A queued or audited answer is a label set; items saved before the kind was kept are single-label."""
    return space_from(item).multi_label


def start_session(store, queue: AuditQueue, labels: list[str], n: int = 50, space: LabelSpace = SINGLE):
    """A blind labeling session of up to `n` queued texts, or None when the queue is empty. `space`: the served
    model's. A session holds answers of one kind, the served model's first: a multi-label one is a multi-label
    session (the person ticks a set, maybe empty)."""
    items = queue.take(n, space.multi_label) or queue.take(n)  # none of the served kind: all are of the other
    if not items:
        return None
    answered = LabelSpace.of(labels, is_set(items[0]), space.sep)  # the kind of the answers taken
    session = store.create_blind(AUDIT_SOURCE, [i["text"] for i in items], labels, answered)
    flag = kind_of(answered).flag
    write_json(session.folder / AUDIT_FILE, {"items": [{**{k: i[k] for k in ("text", "version", "answer")}, **flag}
                                                       for i in items]})
    queue.save()
    return session


def _audited(folder: Path) -> tuple[dict[str, dict], LabelSpace]:
    """A blind session's served answers by text, and the label space of its decisions."""
    answer_of = {i["text"]: i for i in json.loads((folder / AUDIT_FILE).read_text(encoding="utf-8"))["items"]}
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    return answer_of, space_from(meta)


def live_precision(label_root: Path) -> dict:
    """Per version, from the labeled audit sessions. Single-label answers: how many were right (the person's
    label is among the answered ones), overall and per answered class. Multi-label answers: `multi_summary`. 95%
    Wilson intervals. A version with answers of both kinds (saved before the kind was kept) shows the
    single-label figures under `single_label`."""
    single: dict[str, dict] = {}
    sets: dict[str, list[tuple[set, set]]] = {}
    for folder in sorted(Path(label_root).glob("*/")) if Path(label_root).is_dir() else []:
        if not (folder / AUDIT_FILE).is_file():
            continue
        answer_of, space = _audited(folder)
        for d in decisions(folder):
            item = answer_of.get(d["text"])
            if item is None:
                continue
            space_from(item).pick(_tally_label, _tally_set)(single, sets, item, kind_of(space).names(d["label"]))
    out = {}
    for version, v in single.items():
        out[version] = {"audited": v["n"], "precision": v["correct"] / v["n"], "interval": wilson(v["correct"], v["n"]),
                        "per_class": {k: {"audited": c["n"], "precision": c["correct"] / c["n"],
                                          "interval": wilson(c["correct"], c["n"])} for k, c in v["per_class"].items()}}
    for version, pairs in sets.items():
        out[version] = {**multi_summary(pairs), **({"single_label": out[version]} if version in out else {})}
    return out


def _tally_label(single: dict, sets: dict, item: dict, ticked: list[str]) -> None:
    """A single-label answer audited: right when the person's label is among the answered ones."""
    v = single.setdefault(item["version"], {"n": 0, "correct": 0, "per_class": {}})
    right = ticked[0] in item["answer"]
    v["n"] += 1
    v["correct"] += right
    for name in item["answer"]:
        c = v["per_class"].setdefault(name, {"n": 0, "correct": 0})
        c["n"] += 1
        c["correct"] += right


def _tally_set(single: dict, sets: dict, item: dict, ticked: list[str]) -> None:
    """A label-set answer audited: (answered set, ticked set)."""
    sets.setdefault(item["version"], []).append((set(item["answer"]), set(ticked)))


def _rates(asserted: int, ticked: int, both: int) -> dict:
    """Precision (both / asserted) and recall (both / ticked) with their counts; None where nothing to divide."""
    return {"asserted": asserted, "ticked": ticked, "both": both,
            "precision": both / asserted if asserted else None, "interval": wilson(both, asserted),
            "recall": both / ticked if ticked else None, "recall_interval": wilson(both, ticked)}


def multi_summary(pairs: list[tuple[set, set]]) -> dict:
    """(answered set, ticked set) per audited text: micro precision of the asserted labels and micro recall of
    the ticked ones (counts pooled over texts, so a text with more labels weighs more), the share of texts
    whose set is exactly the person's, and each label's precision and recall."""
    exact = sum(a == t for a, t in pairs)
    names = sorted(set().union(*(a | t for a, t in pairs)))
    return {"multi_label": True, "audited": len(pairs),
            **_rates(sum(len(a) for a, _ in pairs), sum(len(t) for _, t in pairs), sum(len(a & t) for a, t in pairs)),
            "exact_match": exact / len(pairs), "exact_interval": wilson(exact, len(pairs)),
            "per_label": {x: _rates(sum(x in a for a, _ in pairs), sum(x in t for _, t in pairs),
                                    sum(x in a and x in t for a, t in pairs)) for x in names}}
