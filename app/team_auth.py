"""Who is calling, for the team routes: a user's bearer token, the --api-key holder, or nobody (one-person
mode: no key and no users). The gate (app/gate.py) asks `lookup`; routes ask `caller`."""

from __future__ import annotations

import time

from fastapi import HTTPException, Request

from labelstore import users

API_KEY_CALLER = "api-key"  # what the gate records for a request carrying --api-key
ACTIVE_TTL_S = 2.0  # a first user added with `python -m app users add` turns auth on within this
# A token found valid is trusted this long without asking the store again: a label save is two requests,
# and the lookup was one of their four transactions. A revocation takes effect within it.
TOKEN_TTL_S = 1.0


class Identities:
    def __init__(self, engine):
        self.engine = engine
        self._active = (0.0, False)
        self._builtin: dict[str, tuple] = {}
        self._seen: dict[str, tuple[float, tuple]] = {}

    def active(self) -> bool:
        """Any user exists: requests must say who they are."""
        at, value = self._active
        if time.monotonic() - at > ACTIVE_TTL_S:
            value = users.has_users(self.engine)
            self._active = (time.monotonic(), value)
        return value

    def lookup(self, token: str) -> tuple | None:
        if not token.startswith(users.TOKEN_PREFIX):
            return None
        now = time.monotonic()
        hit = self._seen.get(token)
        if hit is not None and now - hit[0] < TOKEN_TTL_S:
            return hit[1]
        user = users.by_token(self.engine, token)
        if len(self._seen) > 10_000:  # bounded whatever the number of tokens tried
            self._seen.clear()
        if user is None:
            self._seen.pop(token, None)
        else:
            self._seen[token] = (now, user)
        return user

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
