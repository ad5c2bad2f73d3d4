"""The two requests of every label save, `next` and `labels`, answered without FastAPI's per-request work.

Why: these two are what 16 annotators send hundreds of times a second, and FastAPI's share of each (routing
over every route, the Request object, dependency solving, the body's pydantic round trip, the response
class) was measured against the whole save in bench/team_labels.py (docs/notes/log.md, "FastAPI's per-request
work"). Only the plain case is answered here: a dataset already read, a caller whose role may label,
a JSON body that validates as app/team/routes.py's `Answer` and a label of the set, and the store saying yes.
Anything else (a refusal, a bad body, a record of another dataset, a full text) goes on untouched to the
FastAPI routes of app/team/routes.py, which answer it exactly as before, so statuses and error bodies are theirs.
The gate (app/http/gate.py) runs before both: auth, body bounds, request id, logs and metrics are the same.
"""

from __future__ import annotations

import re

import orjson
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from app.http.gate import replaying, whole_body
from labelstore import queue, tx, users
from labelstore.schema import ROLES

HOT = re.compile(r"/v1/datasets/([0-9]{1,18})/(next|labels)")
_JSON = [(b"content-type", b"application/json")]
_REPLAYED = [(b"idempotent-replayed", b"true")]


def busy_response(exc: tx.Busy) -> JSONResponse:
    """503 with Retry-After: another process holds the database's write lock (labelstore/tx.py Busy); the
    routes of app/team/routes.py answer it the same way."""
    return JSONResponse({"detail": str(exc)}, 503, headers={"Retry-After": str(exc.retry_after)})


class HotRoutes:
    """ASGI middleware inside the gate: `next` and `labels` in their plain case; the rest to `app`."""

    def __init__(self, app, *, engine, who, datasets: dict, answer_model):
        self.app, self.engine, self.who, self.datasets, self.answer_model = app, engine, who, datasets, answer_model
        self.answered = 0  # requests answered here (the rest went on to the routes)

    async def __call__(self, scope, receive, send):
        m = HOT.fullmatch(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if m is None:
            await self.app(scope, receive, send)
            return
        body = await whole_body(receive)
        if body is None:
            return  # the client left
        try:
            answered = await self._answer(m, scope, body, send)
        except tx.Busy as e:  # outside FastAPI's exception handlers: answered as app/team/routes.py answers it
            response = busy_response(e)
            await _respond(send, 503, response.body, [(b"retry-after", str(e.retry_after).encode())])
            return
        if not answered:
            await self.app(scope, replaying(body, receive), send)

    def _caller(self, scope) -> int | None:
        """The caller's id where app/team/routes.py's Callers would let them label; None where it would refuse."""
        user = self.who.who.resolve(scope.get("state", {}).get("user"))
        if user[2] not in ROLES or (self.who.open and user[1] == users.LOCAL):
            return None
        return user[0]

    async def _answer(self, m, scope, body: bytes, send) -> bool:
        uid, ds = self._caller(scope), self.datasets.get(int(m.group(1)))
        if uid is None or ds is None:
            return False
        if m.group(2) == "next":
            record = await tx.call_hot(self.engine, queue.next_record, self.engine, ds, uid)
            await _respond(send, 204, b"", []) if record is None else await _respond(send, 200, orjson.dumps(record))
            self.answered += 1
            return True
        if _content_type(scope) != b"application/json":
            return False
        try:
            answer = self.answer_model.model_validate(orjson.loads(body))
            value = queue.check_value(ds, answer.label, answer.labels)
        except (orjson.JSONDecodeError, ValidationError, queue.BadLabel):
            return False
        try:
            saved, replayed = await tx.call_hot(self.engine, queue.submit, self.engine, ds, uid, answer.record_id, value,
                                            answer.client_event_id)
        except (queue.NotFound, queue.Full, queue.Reused):  # nothing was written: the route answers 404/409/422
            return False
        await _respond(send, 200, orjson.dumps(saved), _REPLAYED if replayed else [])
        self.answered += 1
        return True


def _content_type(scope) -> bytes | None:
    for k, v in scope["headers"]:
        if k == b"content-type":
            return v.split(b";")[0].strip().lower()
    return None


async def _respond(send, status: int, body: bytes, extra=None) -> None:
    """As Starlette's JSONResponse / Response(status_code=204) send it: no length nor type on a 204."""
    headers = [] if status == 204 else [(b"content-length", str(len(body)).encode()), *_JSON]
    await send({"type": "http.response.start", "status": status, "headers": [*(extra or []), *headers]})
    await send({"type": "http.response.body", "body": body})
