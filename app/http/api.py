"""The JSON API: /v1/classify, /v1/labels, /v1/model, health, readiness, metrics; the Hugging Face
client shapes (`POST /`, `POST /predict`, hf_compat.py) on the same engine; /docs and /redoc served offline.

Every failure a client can cause has its own status: 422 names the field, 413 for a body over the limit,
429 with Retry-After when the queue is full, 503 while starting or draining, 504 when the answer takes
longer than --request-timeout. None of them reaches the engine or affects other requests.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from app.config import Config
from app.http.batcher import Closed, MicroBatcher, QueueFull
from app.http.fair_share import FairShare
from app.http.gate import LOGIN_PAGE, SESSION_COOKIE, AuthThrottle, UiSessions, client_of, is_https
from app.http.hf_compat import add_hf_routes
from app.http.metrics import Metrics
from app.llm.fallback import Answered, AnsweredSet, client_name
from labelstore.users import by_token, has_users
from serving.multilabel import MultiLabelPrediction
from textdata.blank import is_blank

log = logging.getLogger("app")
INLINE_TOKENIZE_CHARS = 2000
LOGIN_BODY_BYTES = 16 * 1024  # the sign-in form holds one key
MAX_ERRORS, MAX_NAME_CHARS, MAX_MESSAGE_CHARS = 10, 100, 500  # a 422 names the first errors, not all of them


@dataclass
class ServerState:
    ready: bool = False  # model warmed through the batcher
    draining: bool = False  # SIGTERM received: finish in-flight work, take no new work
    batcher: MicroBatcher | None = None
    served: object = None  # the served app.versions.swap.ServedVersion; replaced whole by a model switch
    on_drain: list = field(default_factory=list)  # called on the event loop when SIGTERM arrives
    sessions: UiSessions = field(default_factory=UiSessions)  # signed UI cookies, secret made at each start
    review: object = None  # app.labeling.review_queue.ReviewQueue with --review-queue: "not sure" answers for a person
    throttle: AuthThrottle = field(default_factory=AuthThrottle)  # wrong keys per client address
    monitor: object = None  # app.monitoring.monitor.Monitor: drift per version (None: --no-monitor)
    shares: FairShare | None = None  # each client address's share of the queue (app/http/fair_share.py)
    store: object = None  # the label store's SQLAlchemy engine (labelstore/): team labeling, users
    identities: object = None  # app.team.auth.Identities: who a token or a UI cookie names
    fallback: object = None  # app.llm.fallback.Fallback: 'not sure' answers sent to an LLM (--fallback-url)


class ClassifyRequest(BaseModel):
    # Unknown fields are errors: a typo such as "txt" should fail loudly, not classify nothing.
    model_config = ConfigDict(extra="forbid")
    texts: list[StrictStr] | None = Field(None, description="texts to classify, answered in the same order")
    text: StrictStr | None = Field(None, description="one text (instead of `texts`)")
    top_k: StrictInt | None = Field(None, ge=1, description="keep only the k most likely labels in `probabilities` "
                                    "(`scores` for a multi-label model)")
    min_confidence: float | None = Field(None, ge=0, le=1, strict=True, description=(
        "this request's own threshold for `confident` (0-1), instead of the model's (GET /v1/model, calibration)"))


class LabelScore(BaseModel):
    label: str
    score: float = Field(description="the calibrated probability of `label` where the model has calibration.json")
    probabilities: dict[str, float]
    confident: bool = Field(description="`score` clears the threshold (the model's, or the request's min_confidence); "
                                        "false: 'not sure'")
    reason: str | None = Field(None, description="why not confident whatever the score: 'out of domain' (the text is "
                               "unlike the training rows)")


class LabelSet(BaseModel):
    """A multi-label model's answer for one text."""

    labels: list[str] = Field(description="the labels whose probability is over their threshold; [] for none")
    scores: dict[str, float] = Field(description="every label's probability (independent sigmoids, id order; "
                                      "calibrated where the model has calibration.json)")
    confident: bool = Field(True, description="every label in `labels` clears its threshold (the model's per-label "
                                              "ones, or the request's min_confidence); false: 'not sure'")


class ClassifyResponse(BaseModel):
    model: str
    model_version: str = Field(description="the registry version that answered (also in X-Model-Version)")
    predictions: list[LabelScore | LabelSet] = Field(description="LabelScore for a single-label model, "
                                                                 "LabelSet for a multi-label one")


def _invalid(loc: list, msg: str, kind: str) -> HTTPException:
    return HTTPException(422, [{"type": kind, "loc": loc, "msg": msg}])


def _describe(error: dict) -> str:
    """'texts.1: Input should be a valid string': the field a client must fix, then what is wrong."""
    loc = error.get("loc", [])
    if error.get("type") == "json_invalid":
        return f"body: invalid JSON near character {loc[-1] if len(loc) > 1 else '?'}; {error.get('msg')}"
    return (".".join(str(p) for p in loc if p != "body") or "body") + f": {error.get('msg')}"


# A value under the other key's shape is the likeliest slip; pydantic alone says only "not a string".
_WRONG_KEY = {("body", "text"): (list, "a list of texts goes under 'texts'; 'text' takes one string"),
              ("body", "texts"): (str, "one text goes under 'text' (or send 'texts' as a list of strings)")}


# What a whole body that is not a JSON object (a list, a string, plain text, nothing) should have been.
_BODY_EXAMPLE = {"/v1/classify": '{"texts": ["..."]}', "/": '{"inputs": "..."}', "/predict": '{"inputs": "..."}'}


def _hint(error: dict, given, path: str = "") -> dict:
    wrong = _WRONG_KEY.get(tuple(error.get("loc", ())))
    if wrong and isinstance(given, wrong[0]):
        error["msg"] = wrong[1]
    loc, kind = tuple(error.get("loc", ())), error.get("type")
    if kind == "json_invalid" or (loc == ("body",) and kind in ("model_attributes_type", "dict_type", "missing")):
        example = _BODY_EXAMPLE.get(path)
        error["msg"] = f"the body must be a JSON object{f' like {example}' if example else ' (see /docs)'}"
    return error


def unicode_problem(text: str) -> str | None:
    """Why `text` is not valid Unicode (a lone surrogate: it passes JSON, then fails every UTF-8 encoding), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"character {e.start + 1} is an unpaired surrogate ({text[e.start]!a}); send valid Unicode"
    return None


def text_problem(text: str, normalize) -> str | None:
    """Why `text` cannot be classified, or None. Checked before the engine: an empty text would be a
    pass of bare special tokens (or of none), and a lone surrogate cannot be encoded at all."""
    problem = unicode_problem(text)
    if problem:
        return problem
    if is_blank(text):  # NUL or zero-width characters only are empty too (textdata/blank.py)
        return "empty text"
    if not normalize(text):
        return "no text after normalisation"
    return None


def public(obj):
    """The export report without the server's own paths (where the model was exported from)."""
    if isinstance(obj, dict):
        return {k: public(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [public(v) for v in obj]
    if isinstance(obj, str) and os.path.isabs(obj):
        return Path(obj).name
    return obj


def check_texts(texts: list[str], cfg: Config, field: str, single: bool, normalize=str.strip) -> None:
    """The per-request limits, for every route that classifies; errors name the client's own `field`."""
    if not texts:
        raise _invalid(["body", field], f"'{field}' is empty: send at least one text", "too_short")
    if len(texts) > cfg.max_texts:
        raise _invalid(["body", field], f"{len(texts)} texts; the limit is {cfg.max_texts} per request "
                       "(--max-texts)", "too_long")
    for i, t in enumerate(texts):
        refused = text_refusal(t, cfg.max_chars, normalize)
        if refused:
            raise _invalid(["body", field] if single else ["body", field, i], *refused)


def text_refusal(text: str, max_chars: int, normalize=str.strip) -> tuple[str, str] | None:
    """(why, pydantic-style error type) where one text breaks the text rules, else None: the rules of every
    route that takes texts (/v1/classify, the team datasets: app/team/inputs.py)."""
    if len(text) > max_chars:
        return f"{len(text)} characters; the limit is {max_chars} per text (--max-chars)", "string_too_long"
    problem = text_problem(text, normalize)
    return (problem, "value_error") if problem else None


def _shape(pred, top_k: int | None, min_confidence: float | None = None) -> dict:
    if isinstance(pred, MultiLabelPrediction):
        # top_k most likely, and every answered label whatever its rank: `labels` never names one missing here
        kept = set(pred.labels) | {k for k, _ in sorted(pred.scores.items(), key=lambda kv: -kv[1])[:top_k or None]}
        scores = pred.scores if top_k is None else dict(sorted(((k, v) for k, v in pred.scores.items() if k in kept),
                                                               key=lambda kv: -kv[1]))
        reason = pred.reason  # "out of domain": not confident at any min_confidence
        source = pred.source if isinstance(pred, AnsweredSet) else None  # --fallback-url: the LLM's set is sure
        sure = pred.confident if min_confidence is None else \
            all(pred.scores[n] >= min_confidence for n in pred.labels) and not reason
        # the version is the response's (model_version, X-Model-Version), as for single-label answers
        return {"labels": pred.labels, "scores": scores, "confident": bool(sure or source == "llm"),
                **({"reason": reason} if reason else {}), **({"source": source} if source else {})}
    probs = pred.probabilities
    if top_k is not None:
        probs = dict(sorted(probs.items(), key=lambda kv: -kv[1])[:top_k])
    reason = pred.reason  # "out of domain": not confident at any min_confidence
    sure = pred.confident if min_confidence is None else pred.score >= min_confidence and not reason
    if isinstance(pred, Answered) and pred.source == "llm":
        sure = True  # the LLM's answer, not a score under the request's threshold
    shaped = {"label": pred.label, "score": pred.score, "probabilities": probs, "confident": bool(sure)}
    if reason:
        shaped["reason"] = reason
    if isinstance(pred, Answered):  # with --fallback-url: who answered
        shaped["source"] = pred.source
    return shaped


def build_api(cfg: Config, state: ServerState, metrics: Metrics) -> FastAPI:
    """The routes read the served version (`state.served`) per request, so a model switch needs no restart."""
    # Swagger UI and ReDoc from the installed fastapi-offline package, not a CDN: /docs works air-gapped.
    app = FastAPIOffline(title="ELECTRA classifier", version="1", docs_url="/docs", redoc_url="/redoc",
                         static_url="/docs/static")
    state.shares = state.shares or FairShare(cfg.max_queue, cfg.max_texts)
    _add_error_handlers(app)
    _add_classify_routes(app, cfg, state, metrics)
    _add_status_routes(app, cfg, state, metrics)
    _add_login_routes(app, cfg, state, metrics)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Validation errors as one shape: each names its field, with a hint, and a one-line `message`."""

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        found = exc.errors()
        errors = [_hint({k: e[k] for k in ("type", "loc", "msg") if k in e}, e.get("input"), request.url.path)
                  for e in found[:MAX_ERRORS]]
        return _validation_response(errors, len(found))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if exc.status_code == 422 and isinstance(exc.detail, list):
            return _validation_response(exc.detail)
        return JSONResponse({"detail": exc.detail}, exc.status_code, headers=exc.headers)


def _add_classify_routes(app: FastAPI, cfg: Config, state: ServerState, metrics: Metrics) -> None:
    """/v1/classify and the Hugging Face shapes (POST /, /predict), all through `classify_texts`."""

    @app.post("/v1/classify", response_model=ClassifyResponse, responses={
        413: {"description": "body over --max-body-bytes"}, 422: {"description": "invalid field (named)"},
        429: {"description": "queue full; see Retry-After"}, 503: {"description": "starting or shutting down"},
        504: {"description": "no answer within --request-timeout"}})
    async def classify(req: ClassifyRequest, request: Request):
        single = req.text is not None
        if single == (req.texts is not None):
            raise _invalid(["body"], "send exactly one of 'texts' (a list) or 'text' (a string)", "missing")
        texts, field = ([req.text], "text") if single else (req.texts, "texts")
        preds = await classify_texts(texts, field, single, request)
        # A plain JSONResponse: re-validating our own output through the response model costs more per
        # request than the JSON encoding itself (response_model above still documents the schema).
        served = request.state.served
        return JSONResponse({"model": served.name, "model_version": served.version,
                             "predictions": [_shape(p, req.top_k, req.min_confidence)
                                             for p in preds]})

    async def classify_texts(texts: list[str], field: str, single: bool, request: Request) -> list:
        """Every route that classifies comes through here: the same limits (errors name the client's
        `field`), one batcher, one timeout, one set of errors. The request keeps the version it finds here
        (its tokenizer, its model) to the end, whatever is activated meanwhile; the gate sends its version
        in X-Model-Version."""
        served = state.served
        clf = served.clf
        try:
            check_texts(texts, cfg, field, single, getattr(clf, "normalizer", str.strip))  # test doubles: a strip
        except HTTPException:
            if state.monitor is not None:
                state.monitor.rejected_empty(served, sum(1 for t in texts if not t.strip()))
            raise
        request.scope.setdefault("state", {}).update(n_texts=len(texts), served=served, model_version=served.version)
        batcher = state.batcher
        if batcher is None:
            raise HTTPException(503, "model is starting", headers={"Retry-After": "1"})
        # Tokenized once, here: the batcher needs lengths, and the engine takes the ids as they are. Big
        # requests go to a thread (64 x 5000 characters would stall the event loop); a short one costs
        # less than the thread hop.
        timing = request.scope.get("state", {}).get("timing")  # --server-timing (app/http/server_timing.py)
        start = time.perf_counter()
        if sum(map(len, texts)) > INLINE_TOKENIZE_CHARS:
            seqs = await asyncio.to_thread(clf.encode, texts)
        else:
            seqs = clf.encode(texts)
        if timing is not None:
            timing["tok"] = time.perf_counter() - start
        client = client_of(request.scope)
        over = state.shares.admit(client, len(texts))
        if over is not None:
            metrics.rejected.labels("client_share").inc()
            raise HTTPException(429, f"busy: this address's texts in flight would pass its share of the queue "
                                     f"({over[0]} texts while {over[1]} addresses use it); retry later",
                                headers={"Retry-After": "1"})
        try:
            preds = await asyncio.wait_for(batcher.submit(seqs, [len(s) for s in seqs], served, timing),
                                           cfg.request_timeout_s)
        except QueueFull as e:
            metrics.rejected.labels("queue_full").inc()
            raise HTTPException(429, f"busy: {e}; retry later", headers={"Retry-After": "1"}) from None
        except Closed:
            raise HTTPException(503, "server is shutting down", headers={"Retry-After": "1"}) from None
        except asyncio.TimeoutError:
            metrics.rejected.labels("timeout").inc()
            # a shed like the 429's: a fleet's client (or nginx) waits before it tries again, not at once
            raise HTTPException(504, f"no answer within {cfg.request_timeout_s:g} s (--request-timeout)",
                                headers={"Retry-After": "1"}) from None
        except Exception:
            log.exception("inference failed")
            raise HTTPException(500, "inference failed; see the server log") from None
        finally:
            state.shares.release(client, len(texts))
        if state.monitor is not None:  # one queue put: the monitor's thread does the counting
            state.monitor.observe(served, preds, texts, seqs, getattr(clf, "max_length", None))
        unsure = [t for t, p in zip(texts, preds) if not p.confident]
        if unsure:  # counted and queued at the model's own threshold, whatever a request asked to see
            metrics.not_confident.inc(len(unsure))
            if state.review is not None:
                state.review.add(texts, preds, served.version)
        if state.fallback is not None:  # the cascade (app/llm/fallback.py)
            who = client_name(request.scope.get("state", {}).get("user"), client)
            preds = await state.fallback.resolve(texts, preds, served.version, list(clf.labels), space=clf.space,
                                                 client=who)
        return preds

    add_hf_routes(app, classify_texts)
    app.state.classify_texts = classify_texts  # the lean path's too (app/http/lean.py)


def _add_status_routes(app: FastAPI, cfg: Config, state: ServerState, metrics: Metrics) -> None:
    """What the model is, with the server's batching and limits; liveness, readiness, Prometheus metrics."""

    @app.get("/v1/labels")
    async def labels():
        return {"labels": list(state.served.clf.labels)}

    @app.get("/v1/model")
    async def model():
        served = state.served
        overhead = await asyncio.to_thread(lambda: served.clf.call_overhead_tokens)  # measured once, off the loop
        return {**served.info, "name": served.name, "version": served.version,
                "batching": {"enabled": cfg.batching, "max_batch_tokens": cfg.max_batch_tokens,
                             "max_wait_ms": cfg.max_wait_ms, "workers": cfg.workers,
                             "engine_batch_tokens": served.clf.batch_tokens,
                             "call_overhead_tokens": round(overhead, 1), "side_rows": getattr(served.clf, "side_rows", None)},
                "limits": {"max_texts": cfg.max_texts, "max_chars": cfg.max_chars,
                           "max_body_bytes": cfg.max_body_bytes, "max_queue": cfg.max_queue,
                           "request_timeout_s": cfg.request_timeout_s}}

    @app.get("/v1/monitor")
    async def monitor():
        """Drift of what each version sees and says against its reference, and live precision from the audit."""
        if state.monitor is None:
            raise HTTPException(404, "monitoring is off (--no-monitor)")
        report = await asyncio.to_thread(state.monitor.report)
        return {**report, "cascade": state.fallback.report()} if state.fallback is not None else report

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz():
        if state.draining:
            return JSONResponse({"status": "draining"}, 503, headers={"Retry-After": "1"})
        if not state.ready:
            return JSONResponse({"status": "warming up"}, 503, headers={"Retry-After": "1"})
        return {"status": "ready"}

    @app.get("/metrics")
    async def metrics_endpoint():
        if state.monitor is not None:
            metrics.set_drift(await asyncio.to_thread(state.monitor.snapshot))
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def _add_login_routes(app: FastAPI, cfg: Config, state: ServerState, metrics: Metrics) -> None:
    """The browser's way in when --api-key is set: a login form that sets a session cookie, and logout."""

    @app.get("/login", include_in_schema=False)
    async def login_page():
        return HTMLResponse(LOGIN_PAGE)

    @app.post("/login", include_in_schema=False)
    async def login(request: Request):
        team = state.store is not None and await asyncio.to_thread(has_users, state.store)
        if not cfg.api_key and not team:
            return RedirectResponse("/ui/", 303)
        client = client_of(request.scope)
        wait = state.throttle.retry_after(client)
        if wait and not await state.throttle.slowed(client):  # a blocked address: slowed (app/http/gate.py)
            metrics.rejected.labels("auth").inc()
            page = LOGIN_PAGE.replace("<h2>Sign in</h2>", f"<h2>Too many tries: wait {wait} s</h2>")
            return HTMLResponse(page, 429, headers={"Retry-After": str(wait)})
        if wait:
            state.throttle.done(client)
        raw = await request.body()
        if len(raw) > LOGIN_BODY_BYTES:  # parsing a 2 MB form of 500,000 fields held the event loop ~0.5 s
            return HTMLResponse(LOGIN_PAGE.replace("<h2>Sign in</h2>", "<h2>Form too large</h2>"), 413)
        form = parse_qs(raw.decode("utf-8", "replace"))
        given = (form.get("key") or [""])[0]
        key_ok = bool(cfg.api_key) and hmac.compare_digest(given.encode(), cfg.api_key.encode())
        # a user's token signs in too (labelstore/users.py)
        user = None if key_ok or not team else await asyncio.to_thread(by_token, state.store, given.strip())
        if not key_ok and not user:
            metrics.rejected.labels("auth").inc()
            state.throttle.fail(client)
            if wait:
                page = LOGIN_PAGE.replace("<h2>Sign in</h2>", f"<h2>Too many tries: wait {wait} s</h2>")
                return HTMLResponse(page, 429, headers={"Retry-After": str(wait)})
            return HTMLResponse(LOGIN_PAGE.replace("<h2>Sign in</h2>", "<h2>Wrong token or key</h2>"), 401)
        resp = RedirectResponse("/ui/", 303)
        # the cookie names the user, so the UI's labels and reviews are theirs (app/ui/team.py)
        resp.set_cookie(SESSION_COOKIE, state.sessions.issue(user[0] if user else None), max_age=int(state.sessions.ttl_s), httponly=True,
                        samesite="strict", secure=is_https(request.scope))
        return resp

    @app.api_route("/logout", methods=["GET", "POST"], include_in_schema=False)
    async def logout(request: Request):
        state.sessions.revoke(request.cookies.get(SESSION_COOKIE))
        signed = cfg.api_key or (state.identities is not None and state.identities.active())  # a key or users
        resp = RedirectResponse("/login" if signed else "/ui/", 303)
        resp.delete_cookie(SESSION_COOKIE, httponly=True, samesite="strict", secure=is_https(request.scope))
        return resp

    @app.get("/", include_in_schema=False)
    async def root():
        return RedirectResponse("/ui/" if cfg.ui else "/docs", 307)


def _short(value, limit: int):
    return value if not isinstance(value, str) or len(value) <= limit else value[:limit] + "…"


def _validation_response(errors: list, total: int | None = None) -> JSONResponse:
    """The first MAX_ERRORS errors and how many there were: a body failing in many places (a list of nulls,
    thousands of unknown keys) once got every error, 46.7 MB of them. Long names are cut: a 1.9 MB key came
    back twice."""
    shown = [{**e, "loc": [_short(p, MAX_NAME_CHARS) for p in e.get("loc", ())],
              "msg": _short(str(e.get("msg", "")), MAX_MESSAGE_CHARS)} for e in errors[:MAX_ERRORS]]
    shown = jsonable_encoder(shown)
    total = len(errors) if total is None else total
    more = total - len(shown)
    message = "; ".join(_describe(e) for e in shown) + (f" (and {more} more errors)" if more else "")
    return JSONResponse({"detail": shown, "message": message, "error_count": total}, 422)
