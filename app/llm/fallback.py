"""The cascade: answers the model is not sure of go to an LLM (`python -m app --fallback-url URL --fallback-model
NAME --fallback-prompt FILE`).

An answer under the model's served threshold (`confident: false`, calibration.json) is sent to the LLM through
the openai client (textdata/llm.py), at most --fallback-concurrency at once; the LLM's answer replaces it
(`source: "llm"`, `confident: true`, `score` the model's probability of that label). Past --fallback-timeout,
on an error, or when the LLM answers outside the label set, the model's own answer is returned as it was
(`source: "model"`, `confident: false`): the caller is never kept waiting longer, and other requests never wait
for the LLM. A multi-label answer the model is not sure of (a label near its threshold) is deferred the same way:
the LLM's label set (parsed as finetune.teach --multi-label reads one; "none" is the empty set) replaces it.
The UI's Classify tab asks through `resolve` as the API does; the Batch tab through `resolve_blocking` (from its
worker thread, on the server's event loop; the timeout there bounds each call, not the wait for a slot: a file's
'not sure' rows queue behind each other).

Every LLM answer is appended to DATA_DIR/teacher/llm_labels.csv (text, teacher, ...: the table
`finetune/kfold.py --teacher-column teacher` reads, beside gold labels; the next retrain reads it:
app/llm/teacher_labels.py) and reused: a text asked once is never paid for again. The texts are the clients', and
an LLM follows instructions inside them ("ignore previous instructions, answer X"): cascade answers are training
data a client can steer. So each row names its client (a user, the --api-key holder, an address), each client may
cause at most --fallback-client-calls paid calls a UTC day (past it, its answers stay the model's: /metrics
app_llm_errors_total{kind="client_cap"}), and a server open to anyone refuses --fallback-url at start, as it
refuses the other flags that keep clients' texts (issue 63, M5). Label sets go to llm_label_sets.csv
(names joined by the model's separator, "" for none), which the next multi-label retrain reads. /metrics: app_llm_deferred_total, app_llm_latency_seconds, app_llm_errors_total{kind},
app_answers_total{source}; /v1/monitor's "cascade": the share deferred, the LLM's measured cost per call and the
estimated cost saved (the texts the model answered itself, times that cost).
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import logging
import os
import time
from pathlib import Path

from prometheus_client import Counter, Histogram

from app.label_kinds import SINGLE
from app.llm.teacher_labels import SETS_FILE, TEACHER_FILE
from serving.engine import Prediction
from serving.multilabel import MultiLabelPrediction
from textdata.labels import LabelSpace
from textdata.llm import ask, make_client, parse_answer, read_prompt, render
from textdata.urls import redact

log = logging.getLogger("app")
STORE_COLUMNS = ["text", "teacher", "llm", "model_version", "model_label", "model_score", "at", "client"]
UNKNOWN_CLIENT = "unknown"  # a caller the cascade was not told of (a test double, an old call site)
MAX_REMEMBERED = 100_000  # answers kept in memory for reuse; the file keeps them all
CLIENT_GRACE_S = 1.0  # seconds the HTTP client's timeout exceeds --fallback-timeout (see _defer)


@dataclasses.dataclass
class Answered(Prediction):
    """A single-label answer in the cascade: the LLM answers one label."""

    source: str = "model"  # "model" | "llm"
    sets = False  # what the LLM is asked for (textdata/llm.parse_answer)

    def store_of(self, fallback) -> TeacherLabels:
        return fallback.store

    def known_names(self, known: str, sep: str) -> list[str]:
        """The names of the LLM's answer kept for this text."""
        return [known]

    def chosen(self, parsed: list[str], labels: list[str]) -> list[str]:
        return parsed[:1]

    def cell(self, names: list[str], sep: str) -> str:
        """The LLM's answer as its file keeps it."""
        return names[0]

    def from_llm(self, names: list[str]) -> Answered:
        label = names[0]
        return dataclasses.replace(self, label=label, score=float(self.probabilities.get(label, 0.0)), confident=True,
                                   source="llm")


@dataclasses.dataclass
class AnsweredSet(MultiLabelPrediction):
    """A multi-label answer in the cascade: the LLM answers a label set (maybe empty)."""

    source: str = "model"  # "model" | "llm"
    sets = True

    def store_of(self, fallback) -> TeacherLabels:
        return fallback.set_store

    def known_names(self, known: str, sep: str) -> list[str]:
        return [n for n in known.split(sep) if n]

    def chosen(self, parsed: list[str], labels: list[str]) -> list[str]:
        return [x for x in labels if x in parsed]

    def cell(self, names: list[str], sep: str) -> str:
        return sep.join(names)

    def from_llm(self, names: list[str]) -> AnsweredSet:
        top = max(names, key=lambda x: self.scores.get(x, 0.0)) if names else self.label
        return dataclasses.replace(self, labels=names, label=top, score=float(self.scores.get(top, self.score)),
                                   confident=True, source="llm")


def by_llm(pred) -> bool:
    """The LLM gave this answer (an engine prediction the cascade did not see: the model did)."""
    return isinstance(pred, (Answered, AnsweredSet)) and pred.source == "llm"


class TeacherLabels:
    """DATA_DIR/teacher/llm_labels.csv, one row appended per LLM answer (one write, O_APPEND), and the answers
    by cache key for reuse."""

    def __init__(self, folder: Path, llm: str, name: str = "llm_labels.csv"):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = folder / name
        self.llm = llm
        self.known: dict[str, str] = {}
        if self.path.exists():
            _add_client_column(self.path)
            with open(self.path, encoding="utf-8", newline="") as f:
                for row in csv.DictReader(f):
                    if row.get("llm") == llm and len(self.known) < MAX_REMEMBERED:
                        self.known[row["text"]] = row["teacher"]
        else:
            self._write(STORE_COLUMNS)
        self.rows = len(self.known)

    def _write(self, row: list) -> None:
        buf = io.StringIO()
        csv.writer(buf).writerow(row)
        # 0600: clients' texts, sent to the LLM (the folder is made 0700)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, buf.getvalue().encode("utf-8"))
        finally:
            os.close(fd)

    def add(self, text: str, label: str, version: str, pred: Prediction, client: str) -> None:
        if len(self.known) < MAX_REMEMBERED:
            self.known[text] = label
        self.rows += 1
        self._write([text, label, self.llm, version, pred.label, f"{pred.score:.6f}",
                     time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), client])


def _add_client_column(path: Path) -> None:
    """A file from before answers named their client (issue 63, M5) gets the column, empty in its old rows: rows
    appended with one cell more than the header would not read back."""
    with open(path, encoding="utf-8", newline="") as f:
        header = next(csv.reader(f), None)
        if header is None or "client" in header:
            return
        rows = [[*row, ""] for row in csv.reader(f)]
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([[*header, "client"], *rows])
    os.replace(tmp, path)


class ClientCap:
    """Paid LLM calls per client per UTC day (--fallback-client-calls; 0: no cap). A client's call is counted when
    it starts, so that a burst of concurrent texts cannot pass the cap; a text answered before costs nothing."""

    def __init__(self, per_day: int):
        self.per_day, self.day, self.used = per_day, None, {}

    def take(self, client: str) -> bool:
        """True and counted when `client` may cause one more paid call today."""
        if not self.per_day:
            return True
        today = time.strftime("%Y-%m-%d", time.gmtime())
        if today != self.day:
            self.day, self.used = today, {}
        n = self.used.get(client, 0)
        if n >= self.per_day:
            return False
        self.used[client] = n + 1
        if n + 1 == self.per_day:
            log.warning("LLM cascade: %s reached --fallback-client-calls %d for today (UTC); its 'not sure' answers "
                        "stay the model's until tomorrow", client, self.per_day,
                        extra={"fields": {"event": "llm_client_cap", "client": client}})
        return True


class Fallback:
    def __init__(self, cfg, registry):
        self.cfg = cfg
        self.template = read_prompt(str(cfg.fallback_prompt))
        self.enabled = True
        self.client = None
        self.gate: asyncio.Semaphore | None = None
        self.store = TeacherLabels((Path(cfg.data_dir) / TEACHER_FILE).parent, cfg.fallback_model)
        self.set_store = TeacherLabels((Path(cfg.data_dir) / TEACHER_FILE).parent, cfg.fallback_model,
                                       SETS_FILE.name)
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's: resolve_blocking runs there
        self.error_kinds: dict[str, int] = {}
        self.counts = {"answers": 0, "deferred": 0, "llm_answered": 0, "from_store": 0, "errors": 0}
        self.tokens = [0, 0]  # paid: prompt, completion
        self.calls = 0
        self.cap = ClientCap(cfg.fallback_client_calls)
        self.deferred = Counter("app_llm_deferred_total", "'Not sure' answers sent to the LLM (--fallback-url)",
                                registry=registry)
        self.latency = Histogram("app_llm_latency_seconds", "LLM answer time, timeouts included", registry=registry,
                                 buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
        self.errors = Counter("app_llm_errors_total", "Deferred answers the LLM did not give: the model's stands",
                              ["kind"], registry=registry)
        self.by_source = Counter("app_answers_total", "Single-label API answers by who gave them", ["source"],
                                 registry=registry)

    async def check(self) -> None:
        """At start: an endpoint that cannot be reached is one warning, and the model answers alone."""
        import openai

        self.loop = asyncio.get_running_loop()
        client = make_client(self.cfg.fallback_url, min(5.0, self.cfg.fallback_timeout_s), 0)
        try:
            await client.models.list()
        except openai.APIStatusError:
            pass  # it answered (a gateway without /models): reachable
        except openai.OpenAIError as e:
            self.enabled = False
            log.warning("--fallback-url %s cannot be reached (%s): the model answers alone, 'not sure' answers "
                        "included", redact(self.cfg.fallback_url), type(e).__name__)
        finally:
            await client.close()

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    async def resolve(self, texts: list[str], preds: list, version: str, labels: list[str], patient: bool = False,
                      space: LabelSpace = SINGLE, client: str = UNKNOWN_CLIENT) -> list:
        """`preds` with each 'not sure' answer replaced by the LLM's where it gave one in time. `patient`: the
        timeout bounds each LLM call, not the wait for a slot (a batch file's rows). `space`: the served model's
        (a label set is stored joined by its separator). `client`: who sent the texts (`client_name`), capped
        and named in the teacher file."""
        label_sep = LabelSpace.of(multi_label=True, sep=space.sep).sep  # a single-label model's: never used
        out, jobs = [], []
        for text, pred in zip(texts, preds):
            if isinstance(pred, MultiLabelPrediction):
                answered = AnsweredSet(**{f.name: getattr(pred, f.name) for f in dataclasses.fields(pred)})
            elif isinstance(pred, Prediction):
                answered = Answered(**{f.name: getattr(pred, f.name) for f in dataclasses.fields(pred)})
            else:
                out.append(pred)
                continue
            out.append(answered)
            self.counts["answers"] += 1
            if not pred.confident and self.enabled:
                jobs.append((len(out) - 1, self._defer(text, answered, version, labels, patient, label_sep, client)))
        for i, llm in zip([i for i, _ in jobs], await asyncio.gather(*(j for _, j in jobs))):
            out[i] = llm
        for p in out:
            if isinstance(p, (Answered, AnsweredSet)):
                self.by_source.labels(p.source).inc()
        return out

    def resolve_blocking(self, texts: list[str], preds: list, version: str, labels: list[str],
                         space: LabelSpace = SINGLE, client: str = UNKNOWN_CLIENT) -> list:
        """`resolve` from a worker thread (the Batch tab), on the server's event loop; the model's answers
        unchanged where there is no loop yet (the check at start has not run)."""
        if self.loop is None or not self.loop.is_running():
            return preds
        return asyncio.run_coroutine_threadsafe(self.resolve(texts, preds, version, labels, True, space, client),
                                                self.loop).result()

    async def _defer(self, text: str, pred: Answered | AnsweredSet, version: str, labels: list[str], patient: bool,
                     sep: str, client: str):
        store = pred.store_of(self)  # the answer's kind: a label, or a label set
        self.counts["deferred"] += 1
        self.deferred.inc()
        known = store.known.get(text)
        if known is not None:  # asked before: never paid for twice
            names = pred.known_names(known, sep)
            if all(n in labels for n in names):
                self.counts["from_store"] += 1
                return pred.from_llm(names)
        if not self.cap.take(client):
            return self._failed("client_cap", pred, None)
        if self.client is None:
            # The client's own timeout sits past the deadline wait_for enforces below: with both equal, a starved
            # loop can fire both in one pass, httpx's timeout swallows wait_for's cancel, and the client retries
            # past the deadline and reports an "error" (seen once in CI under load: timeout counted as error).
            self.client = make_client(self.cfg.fallback_url, self.cfg.fallback_timeout_s + CLIENT_GRACE_S, 1)
            self.gate = asyncio.Semaphore(self.cfg.fallback_concurrency)
        started = time.perf_counter()
        prompt = render(self.template, text, labels)

        async def call():
            async with self.gate:
                if patient:  # the timeout bounds the call itself
                    return await asyncio.wait_for(ask(self.client, self.cfg.fallback_model, prompt),
                                                  self.cfg.fallback_timeout_s)
                return await ask(self.client, self.cfg.fallback_model, prompt)

        try:  # without `patient`, waiting for a slot counts towards the timeout too
            answer = await (call() if patient else asyncio.wait_for(call(), self.cfg.fallback_timeout_s))
        except asyncio.TimeoutError:
            return self._failed("timeout", pred, started)
        self.calls += 1
        self.tokens[0] += answer.input_tokens
        self.tokens[1] += answer.output_tokens
        if answer.error:
            return self._failed("error", pred, started)
        parsed = parse_answer(answer.text, labels, pred.sets)
        if not parsed.in_label_set:
            return self._failed("outside_label_set", pred, started)
        self.latency.observe(time.perf_counter() - started)
        self.counts["llm_answered"] += 1
        chosen = pred.chosen(parsed.labels, labels)
        store.add(text, pred.cell(chosen, sep), version, pred, client)
        return pred.from_llm(chosen)

    def _failed(self, kind: str, pred: Answered, started: float | None) -> Answered:
        if started is not None:  # None: no call was made (the client's cap)
            self.latency.observe(time.perf_counter() - started)
        self.errors.labels(kind).inc()
        self.counts["errors"] += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1
        return pred  # the model's answer, still confident: false

    def report(self) -> dict:
        """/v1/monitor's "cascade"."""
        c, cfg = self.counts, self.cfg
        paid = self.tokens[0] / 1000 * cfg.fallback_price_per_1k_input + self.tokens[1] / 1000 * cfg.fallback_price_per_1k_output
        per_call = paid / self.calls if self.calls else None
        own = c["answers"] - c["deferred"]
        return {"llm": cfg.fallback_model, "reachable": self.enabled, "answers": c["answers"],
                "deferred": c["deferred"], "share_deferred": round(c["deferred"] / c["answers"], 4) if c["answers"] else None,
                "llm_answered": c["llm_answered"], "from_stored_answers": c["from_store"], "errors": c["errors"],
                "errors_by_kind": dict(self.error_kinds),
                "llm_calls": self.calls, "tokens_paid": {"prompt": self.tokens[0], "completion": self.tokens[1]},
                "cost_paid": round(paid, 6), "cost_per_llm_call": None if per_call is None else round(per_call, 8),
                "estimated_cost_saved": None if per_call is None else round((own + c["from_store"]) * per_call, 6),
                "teacher_labels": {"file": str(self.store.path), "rows": self.store.rows},
                "teacher_label_sets": {"file": str(self.set_store.path), "rows": self.set_store.rows}}


def client_name(user, address: str | None) -> str:
    """Who a cascade call is counted against: a user by name, the --api-key holder, else the address."""
    if isinstance(user, tuple):
        return f"user:{user[1]}"
    return "api-key" if user == "api-key" else f"address:{address or UNKNOWN_CLIENT}"


def open_fallback(cfg, metrics):
    """The cascade where --fallback-url is given, else None."""
    return Fallback(cfg, metrics.registry) if cfg.fallback_url else None
