"""What every request passes through before any route: request id, auth, draining, body size, a log line
and metrics. Plain ASGI rather than BaseHTTPMiddleware so Gradio's streaming responses pass untouched.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
import uuid
from collections import OrderedDict, deque

from app.http.body_shape import SCAN_FROM_BYTES, ValueCounter, too_many_values
from app.http.metrics import Metrics, endpoint_label
from app.http.server_timing import header as timing_header
from app.http.upload_guard import is_upload
from app.team import roles
from app.team.auth import SESSION_COOKIE

log = logging.getLogger("app.access")

# Reachable without a key: liveness and readiness probes (a kubelet's httpGet or a compose healthcheck sends no
# secret, and the answer holds none: ok, ready, warming up, draining), the UI's sign-in form.
OPEN_PATHS = roles.OPEN_PATHS  # app/team/roles.py: the routes whose rule is public
DRAIN_OPEN_PATHS = {"/healthz", "/readyz", "/metrics"}  # still answered while draining (readyz says 503)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# JSON values a request may hold: the API's are --max-texts texts and a few fields (max_values below);
# a Gradio event's are its inputs (a text, a session id, ticked labels).
UI_MAX_VALUES, FIELD_VALUES = 4096, 256


SESSION_TTL_S = 12 * 3600
THROTTLE_FAILURES, THROTTLE_WINDOW_S = 10, 60.0
BLOCKED_DELAY_S, BLOCKED_CHECKS = 1.0, 2  # a blocked address: each key check waits 1 s, 2 at once


def proxy_settings(cfg) -> dict:
    """uvicorn's proxy options: X-Forwarded-For / -Proto are trusted only from --forwarded-allow-ips. uvicorn's
    own default trusts them from 127.0.0.1, so any local client (or a proxy passing them on) could rotate its
    address to escape the throttle, or spoof another's to lock it out."""
    ips = list(cfg.forwarded_allow_ips)
    return {"proxy_headers": bool(ips), "forwarded_allow_ips": ips or None}


class UiSessions:
    """The UI cookie: an expiry, who signed in (a user's id; empty for the --api-key holder) and their HMAC
    under a secret made at each start, so a cookie never outlives SESSION_TTL_S or a restart, the key itself
    never sits in a browser's cookie jar, and nobody can change whose it is. Logout revokes."""

    def __init__(self, ttl_s: float = SESSION_TTL_S):
        self.ttl_s = ttl_s
        self._secret = secrets.token_bytes(32)
        self._revoked: dict[str, float] = {}

    def _sign(self, expires: int, user: str) -> str:
        return hmac.new(self._secret, f"electra-ui:{expires}:{user}".encode(), hashlib.sha256).hexdigest()

    def issue(self, user_id: int | None = None) -> str:
        expires, user = int(time.time() + self.ttl_s), "" if user_id is None else str(int(user_id))
        return f"{expires}.{user}.{self._sign(expires, user)}"

    def _read(self, token: str | None) -> str | None:
        """The signed user field ("" for the key holder), or None for a cookie not valid now."""
        parts = (token or "").split(".")
        if len(parts) != 3 or token in self._revoked:
            return None
        expires, user, sig = parts
        if not expires.isdigit() or int(expires) < time.time() or not (user == "" or user.isdigit()):
            return None
        return user if hmac.compare_digest(sig.encode(), self._sign(int(expires), user).encode()) else None

    def valid(self, token: str | None) -> bool:
        return self._read(token) is not None

    def user_of(self, token: str | None) -> int | None:
        """The id of the user a valid cookie was issued to; None for the key holder's or an invalid one."""
        user = self._read(token)
        return int(user) if user else None

    def revoke(self, token: str | None) -> None:
        now = time.time()
        self._revoked = {t: e for t, e in self._revoked.items() if e > now}
        if self.valid(token):
            self._revoked[token] = float(token.partition(".")[0])


class AuthThrottle:
    """Wrong keys per client address: after THROTTLE_FAILURES in THROTTLE_WINDOW_S the address is slowed,
    not locked out: each of its requests waits BLOCKED_DELAY_S before its key is checked, at most
    BLOCKED_CHECKS at once (more get 429 unchecked). A correct key then passes, so one client guessing
    behind a shared proxy does not lock out everyone behind it, and guessing runs at 2 a second, not 900."""

    def __init__(self, failures: int = THROTTLE_FAILURES, window_s: float = THROTTLE_WINDOW_S, clients: int = 10_000,
                 delay_s: float = BLOCKED_DELAY_S, checks: int = BLOCKED_CHECKS):
        self.failures, self.window_s, self.clients = failures, window_s, clients
        self.delay_s, self.checks = delay_s, checks
        self._seen: OrderedDict[str, deque] = OrderedDict()
        self._checking: dict[str, int] = {}

    async def slowed(self, client: str) -> bool:
        """For a blocked `client`: wait, then True (check its key now); False when it already has its share
        of checks waiting (answer 429 without checking). Pair a True with `done(client)`."""
        if self._checking.get(client, 0) >= self.checks:
            return False
        self._checking[client] = self._checking.get(client, 0) + 1
        try:
            await asyncio.sleep(self.delay_s)
        except BaseException:
            self.done(client)
            raise
        return True

    def done(self, client: str) -> None:
        left = self._checking.get(client, 1) - 1
        if left:
            self._checking[client] = left
        else:
            self._checking.pop(client, None)

    def retry_after(self, client: str) -> int:
        """Seconds until `client` may try a key again; 0 when it may now."""
        times = self._seen.get(client)
        now = time.monotonic()
        while times and now - times[0] > self.window_s:
            times.popleft()
        if not times or len(times) < self.failures:
            return 0
        return int(self.window_s - (now - times[0])) + 1

    def fail(self, client: str) -> None:
        self._seen.setdefault(client, deque(maxlen=self.failures)).append(time.monotonic())
        self._seen.move_to_end(client)
        while len(self._seen) > self.clients:  # bounded memory whatever the number of addresses
            self._seen.popitem(last=False)


def client_of(scope) -> str:
    return (scope.get("client") or ("-",))[0]


def is_https(scope) -> bool:
    """Served over TLS, directly or behind a proxy that says so (only ever used to make cookies stricter)."""
    forwarded = (_header(scope, b"x-forwarded-proto") or "").split(",")[0].strip().lower()
    return scope.get("scheme") == "https" or forwarded == "https"


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
<h2>Sign in</h2><p>Paste your personal token (an admin makes it: <code>python -m app users add</code>), or the
server's API key.</p><form method="post" action="/login">
<input type="password" name="key" placeholder="Your token or the API key" autofocus style="width:100%;padding:.5rem">
<button type="submit" style="margin-top:.5rem;padding:.5rem 1rem">Sign in</button></form></body></html>"""


class Gate:
    def __init__(self, app, *, state, metrics: Metrics, api_key: str | None, max_body_bytes: int, sites=None,
                 uploads=None, max_texts: int = 64, identities=None, bulk_values: dict | None = None,
                 authorizer=None, server_timing: bool = False):
        self.app = app
        self.server_timing = server_timing  # --server-timing: a Server-Timing header (app/http/server_timing.py)
        self.authorizer = authorizer  # app/team/roles.py: the caller's role against the route's rule
        # paths whose bodies may hold more values than --max-texts allows: {path: values}, e.g. a new
        # dataset's texts (up to --max-upload-rows, as an upload in the UI)
        self.bulk_values = bulk_values or {}
        self.identities = identities  # app/team/auth.py: users' tokens; once a user exists, auth is on
        self.sites = sites  # app/http/origin.py SiteRule: Host and Origin, before anything else
        self.uploads = uploads  # app/http/upload_guard.py UploadGuard: Gradio's upload route, total and rate
        self.state = state
        self.metrics = metrics
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes
        self.max_texts = max_texts
        self.max_values = 2 * max_texts + FIELD_VALUES

    def credential(self, scope) -> str:
        """"ok", "none" (nothing presented) or "wrong". The UI cookie counts on UI paths only. A user's token
        (app/team/auth.py) is recorded in the request's state for the team routes."""
        if scope["path"] in OPEN_PATHS or not self._auth_on():
            return "ok"
        auth = _header(scope, b"authorization")
        if auth is not None:
            scheme, _, given = auth.partition(" ")
            if scheme.lower() != "bearer":
                return "wrong"
            if self.api_key is not None and hmac.compare_digest(given.strip().encode(), self.api_key.encode()):
                scope.setdefault("state", {})["user"] = "api-key"
                return "ok"
            user = self.identities.lookup(given.strip(), read=False) if self.identities is not None else None
            if user is None:
                return "wrong"
            scope.setdefault("state", {})["user"] = user
            return "ok"
        cookie = _cookie(scope, SESSION_COOKIE)
        if cookie is None or not _is_ui(scope["path"]):
            return "none"
        if not self.state.sessions.valid(cookie):
            return "none"  # expired: sign in again, not a guess
        uid = self.state.sessions.user_of(cookie)
        if uid is None:
            return "ok"
        user = self.identities.by_id(uid, read=False) if self.identities is not None else None
        if user is None:
            return "none"  # the user was revoked since signing in
        scope.setdefault("state", {})["user"] = user
        return "ok"

    def _auth_on(self) -> bool:
        return self.api_key is not None or (self.identities is not None and self.identities.active(read=False))

    async def _read_users(self, scope) -> None:
        """The users' tokens, read in a thread where due (app/team/auth.py `read`): `credential` then asks
        memory only, so the event loop never waits on the database. Open paths (/healthz) never read it."""
        if self.identities is not None and scope["path"] not in OPEN_PATHS:
            auth = _header(scope, b"authorization")
            await self.identities.read(auth.partition(" ")[2].strip() if auth is not None else None)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await self._read_users(scope)
            if scope["type"] == "websocket" and (self.credential(scope) != "ok" or self._refused(scope)):
                await send({"type": "websocket.close", "code": 4401})
                return
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        path = scope["path"]
        rid = _header(scope, b"x-request-id") or ""
        rid = rid if _REQUEST_ID.match(rid) else uuid.uuid4().hex[:16]
        scope.setdefault("state", {})
        if self.server_timing:
            scope["state"]["timing"] = {}  # the classify path fills it (app/http/server_timing.py)
        status_holder = {"status": 500, "started": False}

        async def send_wrapped(message):
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                status_holder["started"] = True
                extra = [(b"x-request-id", rid.encode())]
                # the version that answered (the HF shapes have no field for it); on other routes the one serving
                version = scope["state"].get("model_version") or getattr(self.state.served, "version", None)
                if version:
                    extra.append((b"x-model-version", version.encode()))
                if self.server_timing:
                    extra.append((b"server-timing", timing_header(scope["state"]["timing"], time.perf_counter() - start)))
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        try:
            await self._dispatch(scope, receive, send_wrapped, path)
        except Exception:
            if status_holder["started"]:
                raise
            # Answered here rather than by Starlette's plain-text 500, which would lack the request id.
            log.exception("unhandled error", extra={"fields": {"request_id": rid, "path": path}})
            await _json(send_wrapped, 500, {"detail": "internal error; see the server log", "request_id": rid})
        finally:
            status = status_holder["status"]
            seconds = time.perf_counter() - start
            endpoint = endpoint_label(path)
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(seconds)
            record = {"request_id": rid, "method": scope["method"], "path": path, "status": status,
                      "ms": round(seconds * 1000, 2), "client": client_of(scope)}
            n = scope["state"].get("n_texts")
            if n is not None:
                record["texts"] = n
            # UI assets are many and dull; the API and failures are what an operator reads.
            level = logging.DEBUG if endpoint == "/ui" and status < 400 else logging.INFO
            log.log(level, "request", extra={"fields": record})

    def _refused(self, scope) -> tuple[int, str] | None:
        return self.sites.refusal(scope) if self.sites is not None else None

    async def _dispatch(self, scope, receive, send, path):
        refused = self._refused(scope)
        if refused:
            self.metrics.rejected.labels("site").inc()
            await _json(send, refused[0], {"detail": refused[1]})
            return
        client = client_of(scope)
        await self._read_users(scope)
        guessing = path not in OPEN_PATHS and self._auth_on() and _header(scope, b"authorization") is not None
        wait = self.state.throttle.retry_after(client) if guessing else 0
        if wait:
            if not await self.state.throttle.slowed(client):
                self.metrics.rejected.labels("auth").inc()
                await _json(send, 429, {"detail": "too many wrong keys from this address; retry later"},
                            [(b"retry-after", str(wait).encode())])
                return
            self.state.throttle.done(client)
            if self.credential(scope) != "ok":  # the right key passes, slowed; a wrong one learns nothing new
                self.state.throttle.fail(client)
                self.metrics.rejected.labels("auth").inc()
                await _json(send, 429, {"detail": "too many wrong keys from this address; retry later"},
                            [(b"retry-after", str(wait).encode())])
                return
        credential = self.credential(scope)
        if credential != "ok":
            self.metrics.rejected.labels("auth").inc()
            if credential == "wrong":
                self.state.throttle.fail(client)
            wants_html = "text/html" in (_header(scope, b"accept") or "")
            if wants_html and _is_ui(path):
                await _respond(send, 401, LOGIN_PAGE.encode(), "text/html; charset=utf-8",
                               [(b"www-authenticate", b"Bearer")])
            else:
                await _json(send, 401, {"detail": "missing or invalid API key: send 'Authorization: Bearer KEY'"},
                            [(b"www-authenticate", b"Bearer")])
            return
        why = self.authorizer.refusal(scope) if self.authorizer is not None else None
        if why:
            self.metrics.rejected.labels("role").inc()
            await _json(send, 403, {"detail": why})
            return
        if self.state.draining and path not in DRAIN_OPEN_PATHS:
            self.metrics.rejected.labels("draining").inc()
            await _json(send, 503, {"detail": "server is shutting down"},
                        [(b"retry-after", b"1"), (b"connection", b"close")])
            return
        if self.identities is not None and path not in OPEN_PATHS:
            await self.identities.made(scope["state"].get("user"))  # its first use writes: in a thread
        if _is_ui(path):
            # Gradio enforces its own upload limit (--max-upload-mb) per file; the guard, per request and address.
            if self.uploads is not None and scope["method"] == "POST" and is_upload(path):
                await self.uploads(self.app, scope, receive, send, client)
                return
            if scope["method"] in SAFE_METHODS:  # Gradio's GETs (pages, the event stream) carry no body
                await self.app(scope, receive, send)
                return
        # API bodies and the UI's events are small: read them whole (chunked ones too) up to --max-body-bytes,
        # and count their values before anything parses them (app/http/body_shape.py).
        limit = UI_MAX_VALUES if _is_ui(path) else self.bulk_values.get(path, self.max_values)
        body = await self._read_body(scope, receive, send, limit)
        if body is None:
            return
        await self.app(scope, replaying(body, receive), send)

    async def _read_body(self, scope, receive, send, max_values: int) -> bytes | None:
        """The whole body, or None once refused (413 over --max-body-bytes, not read further; 422 over
        `max_values` JSON values, counted as it arrives, nothing kept past that) or the client is gone."""
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._too_large(send)
            return None
        chunks, size, more, counter = [], 0, True, None
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._too_large(send)
                return None
            chunks.append(chunk)
            more = message.get("more_body", False)
            if counter is None and size >= SCAN_FROM_BYTES:  # big enough to count: what came so far, then each chunk
                counter, chunk = ValueCounter(max_values), b"".join(chunks)
            if counter is not None and counter.feed(chunk):
                # the rest is read (up to the size limit) and dropped, uncounted: the client then gets the answer
                while more and size <= self.max_body_bytes:
                    message = await receive()
                    size += len(message.get("body", b""))
                    more = message.get("more_body", False) and message["type"] != "http.disconnect"
                self.metrics.rejected.labels("body_values").inc()
                what = (f"a request holds at most {self.max_texts} texts (--max-texts) and a few fields"
                        if max_values == self.max_values else "a UI event holds a few inputs"
                        if max_values == UI_MAX_VALUES else "this request holds at most --max-upload-rows texts")
                await _json(send, 422, too_many_values(max_values, what), [(b"connection", b"close")])
                return None
        return b"".join(chunks)

    async def _too_large(self, send):
        self.metrics.rejected.labels("body_size").inc()
        await _json(send, 413, {"detail": f"request body over {self.max_body_bytes} bytes (--max-body-bytes)"},
                    [(b"connection", b"close")])


async def whole_body(receive) -> bytes | None:
    """The request body, for a lean path inside the gate (app/http/lean.py, app/team/hot.py): the gate has read
    it whole already (and bounded it), so this takes its one message; None when the client left."""
    body, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(body)


def replaying(body: bytes, receive):
    """An ASGI receive that gives `body` whole, once, then what `receive` gives (a disconnect)."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _is_ui(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


async def _respond(send, status: int, body: bytes, content_type: str, headers=()):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


async def _json(send, status: int, obj, headers=()):
    await _respond(send, status, json.dumps(obj).encode(), "application/json", headers)
