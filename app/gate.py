"""What every request passes through before any route: request id, auth, draining, body size, a log line
and metrics. Plain ASGI rather than BaseHTTPMiddleware so Gradio's streaming responses pass untouched.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
import uuid

from .metrics import Metrics, endpoint_label

log = logging.getLogger("app.access")

OPEN_PATHS = {"/healthz", "/login"}  # reachable without a key: liveness probes and the UI's login form
DRAIN_OPEN_PATHS = {"/healthz", "/readyz", "/metrics"}  # still answered while draining (readyz says 503)
SESSION_COOKIE = "electra_session"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def session_token(api_key: str) -> str:
    """The UI cookie: derived from the key so the key itself never sits in a browser cookie jar."""
    return hmac.new(api_key.encode(), b"electra-ui-session", hashlib.sha256).hexdigest()


def _header(scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return v.decode("latin-1")
    return None


def _cookie(scope, name: str) -> str | None:
    raw = _header(scope, b"cookie") or ""
    for part in raw.split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    return None


LOGIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Sign in</title></head>
<body style="font-family:sans-serif;max-width:24rem;margin:4rem auto">
<h2>API key required</h2><form method="post" action="/login">
<input type="password" name="key" placeholder="API key" autofocus style="width:100%;padding:.5rem">
<button type="submit" style="margin-top:.5rem;padding:.5rem 1rem">Sign in</button></form></body></html>"""


class Gate:
    def __init__(self, app, *, state, metrics: Metrics, api_key: str | None, max_body_bytes: int):
        self.app = app
        self.state = state
        self.metrics = metrics
        self.api_key = api_key
        self.token = session_token(api_key) if api_key else None
        self.max_body_bytes = max_body_bytes

    def authorized(self, scope) -> bool:
        if self.api_key is None or scope["path"] in OPEN_PATHS:
            return True
        auth = _header(scope, b"authorization") or ""
        scheme, _, given = auth.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.api_key.encode()):
            return True
        cookie = _cookie(scope, SESSION_COOKIE)
        return cookie is not None and hmac.compare_digest(cookie.encode(), self.token.encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            if scope["type"] == "websocket" and not self.authorized(scope):
                await send({"type": "websocket.close", "code": 4401})
                return
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        path = scope["path"]
        rid = _header(scope, b"x-request-id") or ""
        rid = rid if _REQUEST_ID.match(rid) else uuid.uuid4().hex[:16]
        scope.setdefault("state", {})
        status_holder = {"status": 500}

        async def send_wrapped(message):
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                message["headers"] = list(message.get("headers", [])) + [(b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self._dispatch(scope, receive, send_wrapped, path)
        finally:
            status = status_holder["status"]
            seconds = time.perf_counter() - start
            endpoint = endpoint_label(path)
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(seconds)
            record = {"request_id": rid, "method": scope["method"], "path": path, "status": status,
                      "ms": round(seconds * 1000, 2), "client": (scope.get("client") or ("-",))[0]}
            n = scope["state"].get("n_texts")
            if n is not None:
                record["texts"] = n
            # UI assets are many and dull; the API and failures are what an operator reads.
            level = logging.DEBUG if endpoint == "/ui" and status < 400 else logging.INFO
            log.log(level, "request", extra={"fields": record})

    async def _dispatch(self, scope, receive, send, path):
        if not self.authorized(scope):
            self.metrics.rejected.labels("auth").inc()
            wants_html = "text/html" in (_header(scope, b"accept") or "")
            if wants_html and (path == "/ui" or path.startswith("/ui/")):
                await _respond(send, 401, LOGIN_PAGE.encode(), "text/html; charset=utf-8",
                               [(b"www-authenticate", b"Bearer")])
            else:
                await _json(send, 401, {"detail": "missing or invalid API key: send 'Authorization: Bearer KEY'"},
                            [(b"www-authenticate", b"Bearer")])
            return
        if self.state.draining and path not in DRAIN_OPEN_PATHS:
            self.metrics.rejected.labels("draining").inc()
            await _json(send, 503, {"detail": "server is shutting down"},
                        [(b"retry-after", b"1"), (b"connection", b"close")])
            return
        if path == "/ui" or path.startswith("/ui/"):
            # Gradio enforces its own upload limit (--max-upload-mb) on multipart uploads.
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._too_large(send)
            return
        # API bodies are small: read them whole so chunked uploads hit the same limit.
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send):
        self.metrics.rejected.labels("body_size").inc()
        await _json(send, 413, {"detail": f"request body over {self.max_body_bytes} bytes (--max-body-bytes)"},
                    [(b"connection", b"close")])


async def _respond(send, status: int, body: bytes, content_type: str, headers=()):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


async def _json(send, status: int, obj, headers=()):
    await _respond(send, status, json.dumps(obj).encode(), "application/json", headers)
