"""Who is calling, for the team routes: a user's bearer token, the --api-key holder, or nobody (one-person
mode: no key and no users). The gate (app/http/gate.py) asks `lookup`; routes ask `caller`."""

from __future__ import annotations

import asyncio
import time

from fastapi import HTTPException, Request

from labelstore import users

SESSION_COOKIE = "electra_session"  # the UI's sign-in cookie (app/http/gate.py UiSessions)

API_KEY_CALLER = "api-key"  # what the gate records for a request carrying --api-key
# The users' tokens are held in memory and read again at most this often (one read of the users table for
# all requests: it was one of a label save's four transactions): a revocation or a first user added with
# `python -m app users add` takes effect within it. An unknown token reads again after MISS_TTL_S, so a new
# user's first request passes at once, and a client sending wrong tokens causes at most a few reads a second.
TOKEN_TTL_S = 1.0
MISS_TTL_S = 0.25


class Identities:
    def __init__(self, engine):
        self.engine = engine
        self._builtin: dict[str, tuple] = {}
        self._read_at = -1e9
        self._tokens: dict[str, tuple] = {}
        self._ids: dict[int, tuple] = {}
        self._any = False
        self._reading: asyncio.Lock | None = None

    def _stale(self, older_than: float) -> bool:
        return time.monotonic() - self._read_at > older_than

    def _refresh(self, older_than: float) -> None:
        if self._stale(older_than):
            self._tokens, self._any = users.token_table(self.engine)
            self._ids = {u[0]: u for u in self._tokens.values()}
            self._read_at = time.monotonic()

    async def read(self, token: str | None) -> None:
        """What the gate awaits before it asks `active`, `lookup` or `by_id` with read=False: the users table
        read again, in a thread, where it is due. The event loop never waits on the database (a process
        holding SQLite's lock, security round 4 M3); concurrent requests share one read."""
        missed = token is not None and token.startswith(users.TOKEN_PREFIX) and \
            users.token_hash(token) not in self._tokens
        if self._stale(TOKEN_TTL_S) or (missed and self._stale(MISS_TTL_S)):
            self._reading = self._reading or asyncio.Lock()
            async with self._reading:
                await asyncio.to_thread(self._refresh, MISS_TTL_S if missed else TOKEN_TTL_S)

    async def made(self, who) -> None:
        """The built-in identity a request resolves to (`resolve`), made in a thread on its first use."""
        if not isinstance(who, tuple) and (users.API_KEY if who == API_KEY_CALLER else users.LOCAL) not in self._builtin:
            await asyncio.to_thread(self.resolve, who)

    def active(self, read: bool = True) -> bool:
        """Any user exists: requests must say who they are. read=False: what is in memory (see `read`)."""
        if read:
            self._refresh(TOKEN_TTL_S)
        return self._any

    def lookup(self, token: str, read: bool = True) -> tuple | None:
        if not token.startswith(users.TOKEN_PREFIX):
            return None
        if read:
            self._refresh(TOKEN_TTL_S)
        digest = users.token_hash(token)
        user = self._tokens.get(digest)
        if user is None and read:
            self._refresh(MISS_TTL_S)
            user = self._tokens.get(digest)
        return user

    def by_id(self, user_id: int, read: bool = True) -> tuple | None:
        """(id, name, role) of an active user, for a UI cookie (app/http/gate.py UiSessions); None once revoked."""
        if read:
            self._refresh(TOKEN_TTL_S)
        return self._ids.get(user_id)

    def ui_user(self, cfg, sessions, cookie: str | None, recorded=None) -> tuple[int, str, str] | None:
        """Who a UI event comes from: the user its session cookie names, else the user whose token the gate
        recorded for the request (`recorded`: a token sent as `Authorization: Bearer`; issue 63, H2: it once
        made its holder the key holder here), else the key holder (or `local` in one-person mode), an admin.
        None for a user revoked since (the gate refuses them too)."""
        uid = sessions.user_of(cookie)
        if uid is not None:
            return self.by_id(uid)
        if isinstance(recorded, tuple):
            return self.by_id(recorded[0])
        return self.resolve(API_KEY_CALLER if cfg.api_key else None)

    def ui_request_user(self, cfg, sessions, request) -> tuple[int, str, str] | None:
        """ui_user for a Gradio event's request (gr.Request, or None outside one)."""
        http = getattr(request, "request", None) or request  # gr.Request wraps Starlette's
        cookies = getattr(http, "cookies", None) or {}
        recorded = (getattr(http, "scope", None) or {}).get("state", {}).get("user")
        return self.ui_user(cfg, sessions, cookies.get(SESSION_COOKIE), recorded)

    def resolve(self, who) -> tuple[int, str, str]:
        """(id, name, role) for the gate's record of the request."""
        if isinstance(who, tuple):
            return who
        name = users.API_KEY if who == API_KEY_CALLER else users.LOCAL
        if name not in self._builtin:
            self._builtin[name] = users.builtin(self.engine, name)
        return self._builtin[name]

    def caller(self, request: Request, roles: tuple[str, ...]) -> tuple[int, str, str]:
        user = self.resolve(request.scope.get("state", {}).get("user"))
        if user[2] not in roles:
            raise HTTPException(403, f"{user[1]} is {user[2]}; this needs {' or '.join(roles)}")
        return user
