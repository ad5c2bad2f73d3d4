"""How the served model is doing: drift of what it sees and says against the reference saved with it
(textdata/drift.py), per model version, over a sliding window; and the live audit sample (app/labeling/audit.py).

The request path only puts one tuple on a bounded queue (`observe`); a daemon thread bins it into the
version's window, so monitoring costs the API a queue put per request. Statistics (PSI) are computed when
read: by /v1/monitor, /metrics and the Monitor tab, and every `check_every` answers to log a line when a
statistic crosses its alert threshold. Windows and their drift history are saved to the data folder
(`monitor/state.json`, atomically) every `save_every_s` and at shutdown, and read back at start.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.monitoring.mix import correct, distribution, estimated_mix
from serving.multilabel import MultiLabelPrediction
from textdata.drift import (
    CONFIDENCE_EDGES,
    LENGTH_EDGES,
    NONE_LABEL,
    PSI_ALERT,
    PSI_WATCH,
    REFERENCE_FILE,
    bin_index,
    level,
    psi,
)
from textdata.errors import capped
from textdata.plain_files import read_json
from textdata.tables import write_json

log = logging.getLogger("app")
KINDS = ("class_mix", "confidence", "length")
HISTORY = 500  # drift snapshots kept per version (one every check_every answers)
# Answers in a window before its PSI gets a level (watch, alert) and may alert: over 10 bins a few answers are
# noise (3 answers read PSI 4.7 to 17), and the drift chart's first point (check_every) is at 100 too.
DRIFT_MIN_ANSWERS = 100
TOO_FEW = "too few"  # the level of every statistic before DRIFT_MIN_ANSWERS



@dataclass(frozen=True)
class Seen:
    """One answered text, as the window keeps it."""

    t: float
    names: tuple  # answered label(s); NONE_LABEL for a multi-label answer with none
    confidence_bin: int
    length_bin: int
    overlong: bool  # cut at the model's max length
    unsure: bool  # under the calibrated threshold ("not sure"), where the model has one
    probs: tuple | None = None  # single-label: the served probability of each label (the class-mix estimate)


def label_set(pred) -> tuple | None:
    """A multi-label prediction's answer: the labels over their thresholds, maybe none; None for single-label."""
    return tuple(pred.labels) if isinstance(pred, MultiLabelPrediction) else None


def answer_names(pred) -> list[str]:
    """The labels an engine prediction asserts: a multi-label one's set (maybe empty), else its one label."""
    names = label_set(pred)
    return [pred.label] if names is None else list(names)


def answer_scores(pred) -> dict:
    """Every label's probability of an engine prediction: a multi-label one's `scores` (its `probabilities` may be
    cut to top_k), else its `probabilities`."""
    return pred.probabilities if label_set(pred) is None else pred.scores


def answered(pred) -> tuple[tuple, float, bool]:
    """(labels, top score, not sure) of an engine prediction, single- or multi-label."""
    names = label_set(pred)
    if names is not None:
        scores = pred.scores or pred.probabilities or {0: 0.0}
        return names or (NONE_LABEL,), float(max(scores.values())), not pred.confident
    return (pred.label,), float(pred.score), not pred.confident


MAX_REFERENCE_BYTES = 16 << 20  # a real reference is a few KB (10,000 labels: ~0.3 MB)


class OtherModel(ValueError):
    """reference.json names labels the served model does not have."""


def _count(value, field: str) -> float:
    """A histogram count as the window can compare it: a finite, non-negative number (JSON's NaN and
    Infinity, strings, booleans and lists are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{field} {str(value)[:40]!r} is not a finite non-negative count")
    return float(value)


def _histogram(ref: dict, kind: str, edges: list) -> list[float]:
    counts = ref.get(kind).get("counts") if isinstance(ref.get(kind), dict) else None
    if not isinstance(counts, list) or len(counts) != len(edges) - 1:
        raise ValueError(f"{kind}.counts must be a list of {len(edges) - 1} counts")
    return [_count(c, f"{kind}.counts[{i}]") for i, c in enumerate(counts)]


def check_reference(ref, labels: list[str]) -> dict:
    """The reference as the window uses it, only the fields it reads, each checked; ValueError naming the field.
    One bad file must not break /metrics or /v1/monitor for every version (issue 40, M2)."""
    if not isinstance(ref, dict):
        raise TypeError(f"a JSON object is expected, not {type(ref).__name__}")
    mix = ref.get("class_mix")
    if not isinstance(mix, dict):
        raise TypeError(f"class_mix must be an object {{label: count}}, not {type(mix).__name__}")
    unknown = sorted(set(mix) - set(labels) - {NONE_LABEL})
    if unknown:
        raise OtherModel(f"is from another model (labels {capped(map(repr, unknown), 5)} not served)")
    mix = {k: _count(v, f"class_mix[{k!r}]") for k, v in mix.items()}
    fitted = ref.get("mean_probability")
    if isinstance(fitted, dict) and set(fitted) == set(labels):
        fitted = {k: _count(v, f"mean_probability[{k!r}]") for k, v in fitted.items()}
    else:  # a reference from before mean_probability: the answered mix stands in for the training mix
        fitted = None
    return {"source": str(ref.get("source", ""))[:80], "multi_label": ref.get("multi_label") is True,
            "n_rows": int(sum(mix.values())), "class_mix": mix, "mean_probability": fitted,
            "confidence": {"edges": CONFIDENCE_EDGES, "counts": _histogram(ref, "confidence", CONFIDENCE_EDGES)},
            "length": {"edges": LENGTH_EDGES[:-1] + ["inf"], "counts": _histogram(ref, "length", LENGTH_EDGES)}}


def read_reference(folder, labels: list[str]) -> tuple[dict | None, str]:
    """(the version's reference, checked, '') or (None, why there is none: the file and the field)."""
    path = Path(folder) / REFERENCE_FILE if folder is not None else None
    if path is None or not path.is_file():
        return None, "no reference: this version was made before references were saved (or not by k-fold --final)"
    try:
        return check_reference(read_json(path, MAX_REFERENCE_BYTES, "a reference"), labels), ""
    except OtherModel as e:
        return None, f"{REFERENCE_FILE} {e}; drift is not computed"
    except (OSError, ValueError, TypeError, RecursionError) as e:
        return None, f"{REFERENCE_FILE} unreadable ({type(e).__name__}: {str(e)[:200]}); drift is not computed"


class Window:
    """The last `size` answers of one version within `span_s` seconds, with running counts."""

    def __init__(self, version: str, labels: list[str], reference: dict | None, why: str, size: int, span_s: float):
        self.version, self.labels, self.reference, self.why = version, list(labels), reference, why
        self.size, self.span_s = size, span_s
        self.em_start = None  # the last estimated class mix: where the next EM starts (app/monitoring/mix.py)
        self.seen: deque[Seen] = deque()
        self.mix: Counter = Counter()
        self.confidence = np.zeros(len(CONFIDENCE_EDGES) - 1, dtype=np.int64)
        self.length = np.zeros(len(LENGTH_EDGES) - 1, dtype=np.int64)
        self.overlong = self.unsure = self.empty = self.total = 0
        self.history: deque = deque(maxlen=HISTORY)
        self.alerting: set[str] = set()
        self.earlier = False  # restored from state.json for a version not served since the restart

    def add(self, s: Seen) -> None:
        self.seen.append(s)
        self.total += 1
        self._count(s, +1)
        while len(self.seen) > self.size:
            self._count(self.seen.popleft(), -1)

    def expire(self, now: float) -> None:
        while self.seen and self.seen[0].t < now - self.span_s:
            self._count(self.seen.popleft(), -1)

    def _count(self, s: Seen, sign: int) -> None:
        for name in s.names:
            self.mix[name] += sign
        self.confidence[s.confidence_bin] += sign
        self.length[s.length_bin] += sign
        self.overlong += sign * s.overlong
        self.unsure += sign * s.unsure

    def statistics(self) -> dict:
        """PSI per kind against the reference (None without one), and the window's shares."""
        n = len(self.seen)
        names = [*self.labels, *([NONE_LABEL] if NONE_LABEL in (self.reference or {}).get("class_mix", {}) else [])]
        drift = None
        if self.reference is not None and n:
            ref = self.reference
            try:
                drift = {"class_mix": psi([ref["class_mix"].get(k, 0) for k in names],
                                          [self.mix.get(k, 0) for k in names]),
                         "confidence": psi(ref["confidence"]["counts"], self.confidence),
                         "length": psi(ref["length"]["counts"], self.length)}
            except Exception as e:  # noqa: BLE001 - one version's reference must never break /metrics for all
                log.warning("monitor: drift of %s not computed: %r", self.version, e)
                self.reference, self.why, drift = None, f"drift not computed ({type(e).__name__}: {e})"[:300], None
        return {"n": n, "drift": drift,
                "levels": {k: level(v) if n >= DRIFT_MIN_ANSWERS else TOO_FEW for k, v in drift.items()}
                if drift else None,
                "class_mix": {k: self.mix.get(k, 0) for k in names},
                "confidence_counts": self.confidence.tolist(), "length_counts": self.length.tolist(),
                "overlong_share": self.overlong / n if n else 0.0, "not_sure_share": self.unsure / n if n else 0.0,
                "empty_rejected": self.empty}

    def to_json(self) -> dict:
        # the reference too: after a restart, a version no longer served still reads against it (issue 45)
        return {"labels": self.labels, "total": self.total, "empty": self.empty, "history": list(self.history),
                "reference": self.reference, "why": self.why,
                "seen": [[s.t, list(s.names), s.confidence_bin, s.length_bin, s.overlong, s.unsure,
                          *([list(s.probs)] if s.probs is not None else [])] for s in self.seen]}

    def restore(self, saved: dict) -> None:
        for t, names, cb, lb, over, unsure, *probs in saved.get("seen", [])[-self.size:]:
            kept = tuple(float(v) for v in probs[0]) if probs and len(probs[0]) == len(self.labels) else None
            self.add(Seen(t, tuple(names), cb, lb, bool(over), bool(unsure), kept))
        self.total, self.empty = saved.get("total", self.total), saved.get("empty", 0)
        self.history.extend(saved.get("history", []))


class Monitor:
    def __init__(self, folder: Path | None, size: int = 1000, span_s: float = 24 * 3600, check_every: int = 100,
                 save_every_s: float = 30.0, max_pending: int = 10_000):
        if size < 1 or span_s <= 0:
            raise ValueError("the monitor window needs a size >= 1 and a span > 0 seconds")
        self.folder = Path(folder) if folder is not None else None
        self.audit = None  # app.labeling.audit.AuditQueue when --audit-rate > 0
        self.correct_priors = False  # --prior-correction: serve the estimated class mix where it wins
        self.label_root: Path | None = None  # where the audit sessions are, for live precision
        self.size, self.span_s, self.check_every, self.save_every_s = size, span_s, check_every, save_every_s
        self.windows: dict[str, Window] = {}
        self.lock = threading.Lock()
        self._pending: queue.Queue = queue.Queue(maxsize=max_pending)
        self.dropped = 0  # answers not counted because the binning thread fell behind (never blocks a request)
        self._saved = self._load()
        self._last_save = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------- request path: one queue put
    def observe(self, engine, preds: list, texts: list[str], seqs: list, max_length: int | None) -> None:
        """The answers to `texts` (token ids `seqs`; one of `max_length` tokens was cut) by `engine`."""
        try:
            self._pending.put_nowait(("answers", engine, preds, texts, seqs, max_length, time.time()))
        except queue.Full:
            self.dropped += len(preds)

    def rejected_empty(self, engine, n: int = 1) -> None:
        try:
            self._pending.put_nowait(("empty", engine, n))
        except queue.Full:
            pass

    def flush(self) -> None:
        """Wait until every observed answer is binned (tests, shutdown)."""
        self._pending.join()

    # ----------------------------------------------------------- the binning thread
    def _run(self) -> None:
        while True:
            item = self._pending.get()
            try:
                if item is None:
                    return
                self._bin(item)
            except Exception:  # monitoring must never take the server down
                log.exception("monitor: could not count an answer")
            finally:
                self._pending.task_done()
            if time.monotonic() - self._last_save > self.save_every_s:
                self.save()

    def _bin(self, item) -> None:
        kind, engine = item[0], item[1]
        with self.lock:
            w = self._window(engine)
            if kind == "empty":
                w.empty += item[2]
                return
            _, _, preds, texts, seqs, max_length, now = item
            served = getattr(getattr(engine.clf, "calibration", None), "prior", None)  # a correction in force
            for pred, text, seq in zip(preds, texts, seqs):
                names, top, unsure = answered(pred)
                probs = distribution(pred, w.labels)
                if probs is not None and served is not None:  # count the calibrated scores, not the corrected
                    probs = tuple(np.round(served.undo(np.array([probs]))[0], 4).tolist())
                w.add(Seen(now, names, bin_index(top, CONFIDENCE_EDGES), bin_index(len(text), LENGTH_EDGES),
                           bool(max_length and len(seq) >= max_length), unsure, probs))
                if w.total % self.check_every == 0:
                    self._check(w, now)
                    if self.correct_priors:
                        correct(engine, w)
        if self.audit is not None:  # the answer as served: a multi-label one is its set, empty for none
            sets = bool(preds) and None not in [label_set(p) for p in preds]
            self.audit.offer(engine.version, texts, [answer_names(p) for p in preds], sets)

    def attach(self, engine) -> None:
        """Open `engine`'s window now (the served version at start): what state.json kept of it shows in
        /v1/monitor at once, not only after the first request; so do the versions served before the restart
        (a switch, then a restart, must not lose the previous version's figures)."""
        with self.lock:
            self._window(engine)
            for version in list(self._saved):
                self._earlier(version, self._saved.pop(version))

    def _earlier(self, version: str, saved: dict) -> None:
        """The window of a version not served now, as state.json kept it, with the reference it was saved with."""
        try:
            labels = saved["labels"]
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                raise TypeError("labels must be a list of names")
            ref, why = saved.get("reference"), str(saved.get("why") or "")[:300]
            if ref is not None:
                ref = check_reference(ref, labels)
            w = Window(version, labels, ref, why or ("" if ref else "no reference kept with its window (read again when it serves)"),
                       self.size, self.span_s)
            w.restore(saved)
        except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:  # a hand-edited state.json
            log.warning("monitor: the saved window of %s is unreadable (%r); not shown", version, e)
            return
        w.earlier = True
        self.windows[version] = w

    def _window(self, engine) -> Window:
        w = self.windows.get(engine.version)
        if w is not None and w.earlier:  # served again: its reference is read from its folder, as on first serving
            w.earlier = False
            w.reference, w.why = read_reference(getattr(engine.clf, "folder", None), list(engine.clf.labels))
        if w is None:
            clf = engine.clf
            ref, why = read_reference(getattr(clf, "folder", None), list(clf.labels))
            w = self.windows[engine.version] = Window(engine.version, list(clf.labels), ref, why, self.size,
                                                      self.span_s)
            if engine.version in self._saved:
                try:
                    w.restore(self._saved.pop(engine.version))
                except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:  # a hand-edited state.json
                    log.warning("monitor: the saved window of %s is unreadable (%r); starting it fresh", engine.version, e)
                    w = self.windows[engine.version] = Window(engine.version, list(clf.labels), ref, why, self.size,
                                                              self.span_s)
        return w

    def _check(self, w: Window, now: float) -> None:
        w.expire(now)
        stats = w.statistics()
        if stats["drift"] is None:
            return
        w.history.append({"t": round(now, 1), "n": stats["n"], **{k: round(v, 4) for k, v in stats["drift"].items()}})
        if stats["n"] < DRIFT_MIN_ANSWERS:  # an alert waits for the window it needs
            return
        for k, v in stats["drift"].items():
            if v >= PSI_ALERT and k not in w.alerting:
                w.alerting.add(k)
                log.warning("drift alert: %s PSI %.3f >= %.2f on version %s over the last %d answers", k, v,
                            PSI_ALERT, w.version, stats["n"],
                            extra={"fields": {"event": "drift_alert", "kind": k, "psi": round(v, 4),
                                              "version": w.version}})
            elif v < PSI_ALERT and k in w.alerting:
                w.alerting.discard(k)

    # ----------------------------------------------------------- reading
    def snapshot(self) -> dict:
        now = time.time()
        with self.lock:
            versions = {}
            for v, w in self.windows.items():
                w.expire(now)
                stats = w.statistics()
                # alerts as the levels read now: the alerting set moves only every check_every answers (it
                # decides when a warning is logged), so it could say [] beside a level "alert"
                alerts = sorted(k for k, lv in (stats["levels"] or {}).items() if lv == "alert")
                versions[v] = {**stats, "estimated_mix": estimated_mix(w), "total": w.total,
                               "reference": w.reference, "reference_note": w.why,
                               "history": list(w.history), "alerts": alerts, "labels": w.labels}
        return {"window": {"size": self.size, "span_s": self.span_s}, "thresholds": {"watch": PSI_WATCH, "alert": PSI_ALERT},
                "dropped": self.dropped, "audit_queue": len(self.audit) if self.audit is not None else 0,
                "versions": versions}

    def report(self) -> dict:
        """/v1/monitor: the snapshot, with live precision per version from the labeled audit sessions."""
        from app.labeling.audit import live_precision

        snap = self.snapshot()
        snap["audit"] = {"rate": self.audit.rate if self.audit is not None else 0.0, "queued": snap["audit_queue"],
                         "live_precision": live_precision(self.label_root) if self.label_root is not None else {}}
        for version, live in snap["audit"]["live_precision"].items():
            if version in snap["versions"]:
                snap["versions"][version]["live_precision"] = live
        return snap

    # ----------------------------------------------------------- persistence
    def _state_path(self) -> Path | None:
        return self.folder / "state.json" if self.folder is not None else None

    def _load(self) -> dict:
        path = self._state_path()
        if path is None or not path.is_file():
            return {}
        try:
            return json.loads(path.read_text(encoding="utf-8")).get("versions", {})
        except (OSError, ValueError) as e:
            log.warning("monitor: %s unreadable (%s); starting fresh windows", path.name, type(e).__name__)
            return {}

    def save(self) -> None:
        path = self._state_path()
        if path is None:
            return
        with self.lock:
            state = {"versions": {**self._saved, **{v: w.to_json() for v, w in self.windows.items()}}}
        if state["versions"]:  # nothing served yet: nothing to keep
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, state)
        if self.audit is not None:
            self.audit.save()
        self._last_save = time.monotonic()

    def close(self) -> None:
        self.flush()
        self._pending.put(None)
        self._thread.join(timeout=5)
        self.save()
