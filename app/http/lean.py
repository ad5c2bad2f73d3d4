"""POST /v1/classify's plain case answered without FastAPI's per-request work, as app/team/hot.py does for
the label saves.

Why: one short text's answer is a few milliseconds, and FastAPI's share of it (routing over every route, the
Request object, dependency solving, reading the body again, the body's validation error wrapping, the
exception middleware) is a fixed cost on each (docs/results.md, "One text against a hand-written service").
Only a body this path can read exactly as the route would is answered here: `Content-Type: application/json`,
JSON that orjson reads (stricter than the route's `json.loads`: NaN, lone surrogates and huge integers go on),
an object that validates as api.py's `ClassifyRequest` and names exactly one of `text` / `texts`. Everything
else goes on untouched to the FastAPI route, which answers it as before, so its statuses and 422 bodies are
the route's own. Past that point both run the same `classify_texts` (limits and their 422s, queue shares and
429s, the batcher, the monitor, the review queue, the fallback) and build the same JSONResponse. The gate
(app/http/gate.py) runs before both: auth and roles, body bounds, request id, logs, metrics, Server-Timing.
`--no-lean-classify` turns this off (tests/app/test_app_lean.py compares the two answer for answer).
"""

from __future__ import annotations

import orjson
from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from app.http.api import ClassifyRequest, _shape, _validation_response
from app.http.gate import replaying, whole_body

PATH = "/v1/classify"


class LeanClassify:
    """ASGI middleware inside the gate: valid POST /v1/classify bodies answered here; the rest to `app`."""

    def __init__(self, app, *, classify_texts):
        self.app, self.classify_texts = app, classify_texts
        self.answered = 0  # requests answered here (the rest went on to the route)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await whole_body(receive)
        if body is None:
            return  # the client left
        req = _parsed(scope, body)
        if req is None:
            await self.app(scope, replaying(body, receive), send)
            return
        response = await self._answer(req, scope)
        self.answered += 1
        await response(scope, receive, send)

    async def _answer(self, req: ClassifyRequest, scope) -> JSONResponse:
        """The route's own answer (api.py `classify`), its HTTPExceptions as api.py's `http_error` renders them."""
        request = Request(scope)
        single = req.text is not None
        texts, field = ([req.text], "text") if single else (req.texts, "texts")
        try:
            preds = await self.classify_texts(texts, field, single, request)
        except HTTPException as exc:
            if exc.status_code == 422 and isinstance(exc.detail, list):
                return _validation_response(exc.detail)
            return JSONResponse({"detail": exc.detail}, exc.status_code, headers=exc.headers)
        served = request.state.served
        return JSONResponse({"model": served.name, "model_version": served.version,
                             "predictions": [_shape(p, req.top_k, req.min_confidence) for p in preds]})


def _parsed(scope, body: bytes) -> ClassifyRequest | None:
    """The body as the route would take it, or None where the route should answer (its 422 is the one to give)."""
    if _content_type(scope) != b"application/json":
        return None
    try:
        data = orjson.loads(body)
        if not isinstance(data, dict):
            return None
        req = ClassifyRequest.model_validate(data)
    except (orjson.JSONDecodeError, ValidationError):
        return None
    return req if (req.text is None) != (req.texts is None) else None


def _content_type(scope) -> bytes | None:
    for k, v in scope["headers"]:
        if k == b"content-type":
            return v.split(b";")[0].strip().lower()
    return None
