"""Team labeling over HTTP: datasets with a shared queue (overlap k), answers, undo, agreement, export.

    POST /v1/datasets                     {"name", "texts", "overlap", "labels"?}  -> 201 {"id", ...}
    GET  /v1/datasets                     the datasets, with progress
    POST /v1/datasets/{id}/next           -> {"record_id", "text", "suggestion"}, 204 when none is left for you
    POST /v1/datasets/{id}/labels         {"record_id", "label" | "labels", "client_event_id"}
    POST /v1/datasets/{id}/undo           take back your last answer or skip
    POST /v1/datasets/{id}/skip           {"record_id"}: give back the text you hold; it comes back to you last
    POST /v1/datasets/{id}/adjudicate     {"record_id", "label" | "labels"}  (reviewer, admin)
    GET  /v1/datasets/{id}/agreement      alpha, Fleiss' kappa, per label, per annotator (reviewer, admin)
    GET  /v1/datasets/{id}/export?format=csv|jsonl  record_id,text,annotator,label,created_at (reviewer, admin)
         ...&rows=final                              one row a text: record_id,text,label,decided,answers,agreement

Blind: an annotator is never shown another's answer (agreement and export need a reviewer). The store is
synchronous, so these routes are plain functions FastAPI runs on its thread pool, except the two of every
label save, `next` and `labels`: async, their store work through labelstore/tx.py call_hot, and their plain
case answered before FastAPI by app/team/hot.py.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone

import numpy as np
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from app.config import open_to_anyone
from app.label_kinds import asked_space, dataset_space, kind_of
from app.team.auth import Identities
from app.team.hot import HotRoutes, busy_response
from app.team.inputs import DatasetId, RecordId, Text, check_labels, check_texts, normalizer, shown
from labelstore import queue, review, tx, users
from labelstore.agreement import agreement
from labelstore.schema import ROLES
from serving.calibration import no_threshold_reason
from textdata.labels import is_formula

STAFF = ("reviewer", "admin")
MAX_OVERLAP = 20
SCORE_CHUNK = 64


class NewDataset(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Text = Field(min_length=1, max_length=200)
    texts: list[Text] = Field(min_length=1)
    overlap: StrictInt = Field(1, ge=1, le=MAX_OVERLAP, description="answers wanted per text, each from a different person")
    labels: list[Text] | None = Field(None, min_length=1, description="the label set (default: the served model's)")
    multi_label: bool | None = Field(None, description="answers are label sets (default: as the served model)")


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    record_id: RecordId
    label: Text | None = None
    labels: list[Text] | None = None
    client_event_id: Text | None = Field(None, min_length=1, max_length=100, description=(
        "an id the client makes per answer (a UUID): a retry with the same id returns the first answer"))


class Skip(BaseModel):
    model_config = ConfigDict(extra="forbid")
    record_id: RecordId


def _bad(field: str, msg: str) -> HTTPException:
    return HTTPException(422, [{"type": "value_error", "loc": ["body", field], "msg": msg}])


def new_dataset(state, engine, body: NewDataset, uid: int) -> dict:
    """A dataset from checked texts, the served model's answers as suggestions where its labels are the
    dataset's: one path for `POST /v1/datasets` and the Team tab's upload."""
    served = state.served
    clf = served.clf
    space = asked_space(body.multi_label, clf.space)
    check_labels(body.labels or (), space)
    labels = list(dict.fromkeys(body.labels or clf.labels))
    model_labels = list(clf.labels) == labels and space.kind == clf.space.kind
    rows = _suggestions(clf, body.texts) if model_labels else [{} for _ in body.texts]
    for row, text in zip(rows, body.texts):
        row.update(text=text, model_version=served.version if model_labels else None)
    ds, n, dup = queue.create_dataset(engine, body.name, labels, space.multi_label, body.overlap, rows, uid)
    return {"id": ds, "records": n, "duplicates": dup, "labels": labels, "multi_label": space.multi_label,
            "overlap": body.overlap}


def _suggestions(clf, texts: list[str]) -> list[dict]:
    """The served model's answer per text: shown as the suggestion, and its confidence orders the queue."""
    suggest = clf.space.pick(_label_suggestions, _set_suggestions)  # a multi-label model: its set over thresholds
    rows = []
    for start in range(0, len(texts), SCORE_CHUNK):
        chunk = texts[start:start + SCORE_CHUNK]
        rows += suggest(clf, clf.predict_encoded(clf.encode(chunk)))
    return rows


def _label_suggestions(clf, preds: list) -> list[dict]:
    """With how sure the model was, as the Label tab shows it (issue 59): `confident` where the model has a
    threshold, else `no_threshold` and why, so no suggestion looks sure that nothing made sure."""
    bare = no_threshold_reason(getattr(clf, "calibration", None))
    sure = (lambda p: {"no_threshold": bare}) if bare else (lambda p: {"confident": bool(getattr(p, "confident", True))})
    return [{"suggestion": {"label": p.label, "score": round(float(p.score), 4), **sure(p)}, "priority": float(p.score)}
            for p in preds]


def _set_suggestions(clf, preds: list) -> list[dict]:
    from serving.multilabel import decision_margin

    probs = np.array([[p.scores[lab] for lab in clf.labels] for p in preds]).reshape(len(preds), -1)
    margin = decision_margin(probs, np.asarray(clf.thresholds, np.float64))
    return [{"suggestion": {"labels": p.labels}, "priority": float(m)} for p, m in zip(preds, margin)]


def _cell(value):
    """A CSV cell a spreadsheet shows as text: one starting with = + - @, tab or CR gets a leading `'`
    (numbers such as -5 are left alone), the rule of the UI's downloads (app/ui/uploads.py)."""
    return "'" + value if is_formula(value) else value


def _reader(engine):
    """dataset(id) -> Dataset, or 404. A dataset's settings never change once made: each is read once."""
    cache: dict[int, queue.Dataset] = {}

    def dataset(dataset_id: int) -> queue.Dataset:
        if dataset_id not in cache:
            try:
                found = queue.get_dataset(engine, dataset_id)
            except queue.NotFound as e:
                raise HTTPException(404, str(e)) from None
            if len(cache) > 10_000:
                cache.clear()
            cache[dataset_id] = found
        return cache[dataset_id]

    dataset.cache = cache
    return dataset


def _value(ds: queue.Dataset, body) -> object:
    try:
        return queue.check_value(ds, body.label, body.labels)
    except queue.BadLabel as e:
        raise _bad(kind_of(dataset_space(ds)).answer_field, str(e)) from None


def open_refusal(cfg) -> str:
    return (f"team datasets are refused: they hold labeled texts, and this server has no --api-key, no users and "
            f"listens on {cfg.host}, so anyone who can reach it could read and change them. Add users (`python -m "
            f"app users add NAME --role admin`), give --api-key KEY, listen on 127.0.0.1, or pass --allow-admin")


class Callers:
    """who.caller, refusing one-person mode (no key, no users) where anyone can reach the server, like
    /v1/models (app/versions/admin.py): the datasets hold labeled texts."""

    def __init__(self, cfg, who: Identities):
        self.open = open_to_anyone(cfg)
        self.why = open_refusal(cfg)
        self.who = who

    def caller(self, request: Request, roles: tuple[str, ...]) -> tuple[int, str, str]:
        user = self.who.caller(request, roles)
        if self.open and user[1] == users.LOCAL:
            raise HTTPException(403, self.why)
        return user


def add_team_routes(app: FastAPI, cfg, state, engine, identities: Identities) -> None:
    dataset = _reader(engine)
    cached = dataset.cache
    who = Callers(cfg, identities)

    @app.exception_handler(tx.Busy)
    async def busy(request: Request, exc: tx.Busy):
        return busy_response(exc)

    @app.post("/v1/datasets", status_code=201)
    def create(body: NewDataset, request: Request):
        uid = who.caller(request, STAFF)[0]
        if len(body.texts) > cfg.max_upload_rows:
            raise _bad("texts", f"{len(body.texts)} texts; the limit is {cfg.max_upload_rows} (--max-upload-rows)")
        check_texts(body.texts, cfg.max_chars, normalizer(state))
        return new_dataset(state, engine, body, uid)

    @app.get("/v1/datasets")
    def datasets(request: Request):
        who.caller(request, ROLES)
        return {"datasets": [shown(d) for d in queue.list_datasets(engine)]}

    @app.delete("/v1/datasets/{dataset_id}")
    def delete_dataset(dataset_id: DatasetId, request: Request):
        who.caller(request, ("admin",))
        try:
            n = queue.delete_dataset(engine, dataset_id)
        except queue.NotFound as e:
            raise HTTPException(404, str(e)) from None
        cached.pop(dataset_id, None)  # the hot path (app/team/hot.py) reads this dict too
        return {"id": dataset_id, "deleted": True, "records": n}

    # The two requests of every label save: async, their store work on the event loop when the writer lock is
    # free, else in the store's thread (labelstore/tx.py call_hot)
    @app.post("/v1/datasets/{dataset_id}/next", responses={204: {"description": "nothing left for you"}})
    async def next_text(dataset_id: DatasetId, request: Request):
        uid = who.caller(request, ROLES)[0]
        ds = dataset(dataset_id) if dataset_id in cached else await tx.call(engine, dataset, dataset_id)
        record = await tx.call_hot(engine, queue.next_record, engine, ds, uid)
        return Response(status_code=204) if record is None else JSONResponse(record)

    @app.post("/v1/datasets/{dataset_id}/labels")
    async def label(dataset_id: DatasetId, body: Answer, request: Request):
        uid = who.caller(request, ROLES)[0]
        ds = dataset(dataset_id) if dataset_id in cached else await tx.call(engine, dataset, dataset_id)
        value = _value(ds, body)
        try:
            saved, replayed = await tx.call_hot(engine, queue.submit, engine, ds, uid, body.record_id, value,
                                            body.client_event_id)
        except queue.NotFound as e:
            raise HTTPException(404, str(e)) from None
        except queue.Full as e:
            raise HTTPException(409, str(e)) from None
        except queue.Reused as e:
            raise _bad("client_event_id", str(e)) from None
        return JSONResponse(saved, headers={"Idempotent-Replayed": "true"} if replayed else None)

    @app.post("/v1/datasets/{dataset_id}/undo")
    def undo(dataset_id: DatasetId, request: Request):
        uid = who.caller(request, ROLES)[0]
        done = queue.undo_last(engine, dataset(dataset_id), uid)
        if done is None:
            raise HTTPException(404, "you have no answer or skip in this dataset to undo")
        return done

    @app.post("/v1/datasets/{dataset_id}/skip")
    def skip(dataset_id: DatasetId, body: Skip, request: Request):
        uid = who.caller(request, ROLES)[0]
        try:
            skipped = queue.skip(engine, dataset(dataset_id), uid, body.record_id)
        except queue.NotFound as e:
            raise HTTPException(404, str(e)) from None
        if not skipped:
            raise HTTPException(409, f"you do not hold record {body.record_id}: answered, or never given to you")
        return {"record_id": body.record_id, "skipped": True}

    _add_review_routes(app, engine, who, dataset)
    # the plain case of next and labels without FastAPI's per-request work (app/team/hot.py says why)
    app.add_middleware(HotRoutes, engine=engine, who=who, datasets=cached, answer_model=Answer)


def _add_review_routes(app: FastAPI, engine, who: Callers, dataset) -> None:
    @app.post("/v1/datasets/{dataset_id}/adjudicate")
    def adjudicate(dataset_id: DatasetId, body: Answer, request: Request):
        uid = who.caller(request, STAFF)[0]
        ds = dataset(dataset_id)
        try:
            return review.adjudicate(engine, ds, uid, body.record_id, _value(ds, body))
        except queue.NotFound as e:
            raise HTTPException(404, str(e)) from None

    @app.get("/v1/datasets/{dataset_id}/agreement")
    def agree(dataset_id: DatasetId, request: Request):
        who.caller(request, STAFF)
        ds = dataset(dataset_id)
        figures = agreement(review.answer_rows(engine, ds), ds.labels, ds.multi_label, ds.overlap)
        return {**figures, "progress": review.progress(engine, ds)}

    @app.get("/v1/datasets/{dataset_id}/export")
    def export(dataset_id: DatasetId, request: Request, format: str = Query("csv", pattern="^(csv|jsonl)$"),
               rows: str = Query("answers", pattern="^(answers|final)$")):
        who.caller(request, STAFF)
        if rows == "final":  # one row a text: the labels the next retrain takes (app/team/final_export.py)
            from app.team.final_export import final_text

            text = final_text(engine, dataset(dataset_id), format)[0]
        else:
            text = export_text(engine, dataset(dataset_id), format)
        name = f"dataset-{dataset_id}-final" if rows == "final" else f"dataset-{dataset_id}"
        headers = {"Content-Disposition": f'attachment; filename="{name}.{format}"'}
        return Response(text, media_type="application/x-ndjson" if format == "jsonl" else "text/csv; charset=utf-8",
                        headers=headers)


def export_text(engine, ds: queue.Dataset, format: str, annotator: str | None = None) -> str:
    """The export's file (csv or jsonl): one row per answer, `annotator`'s only where given (the Label tab's
    download for an annotator, app/ui/team_label.py)."""
    rows = [{**{k: r[k] for k in ("record_id", "text", "annotator")}, "label": r["value"],
             "created_at": datetime.fromtimestamp(r["created_at"], timezone.utc).isoformat()}
            for r in review.answer_rows(engine, ds) if annotator is None or r["annotator"] == annotator]
    if format == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, ["record_id", "text", "annotator", "label", "created_at"])
    writer.writeheader()
    kind = kind_of(dataset_space(ds))
    for r in rows:  # a person opens this file: no cell may run as a spreadsheet formula
        writer.writerow({k: _cell(v) for k, v in {**r, "label": kind.store_cell(r["label"])}.items()})
    return out.getvalue()
