"""Who is calling, for the team routes: a user's bearer token, the --api-key holder, or nobody (one-person
mode: no key and no users). The gate (app/gate.py) asks `lookup`; routes ask `caller`."""

from __future__ import annotations

import time

from fastapi import HTTPException, Request

from labelstore import users

API_KEY_CALLER = "api-key"  # what the gate records for a request carrying --api-key
ACTIVE_TTL_S = 2.0  # a first user added with `python -m app users add` turns auth on within this


class Identities:
    def __init__(self, engine):
        self.engine = engine
        self._active = (0.0, False)
        self._builtin: dict[str, tuple] = {}

    def active(self) -> bool:
        """Any user exists: requests must say who they are."""
        at, value = self._active
        if time.monotonic() - at > ACTIVE_TTL_S:
            value = users.has_users(self.engine)
            self._active = (time.monotonic(), value)
        return value

    def lookup(self, token: str) -> tuple | None:
        return users.by_token(self.engine, token) if token.startswith(users.TOKEN_PREFIX) else None

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
