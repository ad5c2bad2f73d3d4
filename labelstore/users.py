"""Annotators, reviewers and admins, with bearer tokens stored hashed.

A token is 256 random bits (secrets.token_urlsafe), so it is stored as its SHA-256, not an argon2 hash:
argon2 exists to slow the guessing of low-entropy passwords, which a random 256-bit token is not, and a
salted argon2 hash cannot be looked up: every request would verify against every user's hash. pwdlib's
recommended argon2 measured 0.47 s a verify on these 2 shared cores (load 4.8) against 1.4 us for SHA-256
(bench/team_labels.py printed both until issue 60; docs/notes/log.md, "Team labeling"): with 20 users a request would cost seconds. SHA-256 of the token is an
indexed lookup. GitHub and PyPI store API tokens the same way.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import unicodedata

import sqlalchemy as sa

from labelstore import tx
from labelstore.schema import ROLES, users

TOKEN_PREFIX = "lbl_"
LOCAL, API_KEY = "local", "api-key"  # built-in identities: one-person mode, and the --api-key holder


class UserError(ValueError):
    pass


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# A user name is shown in the UI, the event log, the export's annotator column and log lines: letters and
# their marks (any script), digits, . _ - @ and single inner spaces, starting with a letter, a digit or _, so no
# newline or control character splits a row, no quote, invisible or bidirectional character makes it read as
# another, and no = + - @ start makes a spreadsheet run it.
MAX_NAME = 100  # the column's length
_PUNCT = "._-@"


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a user's name, or None."""
    if name in (LOCAL, API_KEY):
        return "is reserved (a built-in identity)"
    if not name or len(name) > MAX_NAME:
        return f"must be 1 to {MAX_NAME} characters"
    kinds = [unicodedata.category(c)[0] for c in name]
    starts = kinds[0] in "LN" or name[0] == "_"
    fits = all(k in "LMN" or c in _PUNCT or (c == " " and 0 < i < len(name) - 1 and name[i + 1] != " ")
               for i, (c, k) in enumerate(zip(name, kinds)))
    if not (starts and fits):
        return ("may hold only letters, digits, '.', '_', '-', '@' and single inner spaces, and must start with a "
                "letter, a digit or '_'")
    return None


def add_user(engine: sa.Engine, name: str, role: str) -> str:
    """Create NAME with ROLE; returns its token (shown once, stored hashed)."""
    name = name.strip()
    if role not in ROLES:
        raise UserError(f"role {role!r} is not one of {', '.join(ROLES)}")
    problem = name_problem(name)
    if problem:
        raise UserError(f"user name {name[:MAX_NAME]!a} {problem}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)

    def insert(conn):
        if conn.execute(sa.select(users.c.id).where(users.c.name == name)).first():
            raise UserError(f"user {name!r} exists: `users token {name}` gives it a new token")
        conn.execute(users.insert().values(name=name, role=role, token_hash=token_hash(token), created_at=time.time()))

    tx.run(engine, insert)
    return token


def new_token(engine: sa.Engine, name: str) -> str:
    """A new token for NAME (the old one stops working; a revoked user is active again)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)

    def rotate(conn):
        done = conn.execute(users.update().where(users.c.name == name, users.c.token_hash.is_not(None))
                            .values(token_hash=token_hash(token), revoked_at=None))
        if not done.rowcount:
            raise UserError(f"no user {name!r} (`users list` shows them)")

    tx.run(engine, rotate)
    return token


def revoke(engine: sa.Engine, name: str) -> None:
    """Revoke NAME's token (401 from now on); refused for the last active admin, as a demotion is (`set_role`)."""
    def revoke_(conn):
        row = _person(conn, name)
        if row.role == "admin" and row.revoked_at is None:
            _keep_an_admin(conn, name)
        conn.execute(users.update().where(users.c.id == row.id).values(revoked_at=time.time()))

    tx.run(engine, revoke_)


def _person(conn, name: str):
    row = conn.execute(sa.select(users.c.id, users.c.role, users.c.revoked_at)
                       .where(users.c.name == name, users.c.token_hash.is_not(None))).first()
    if row is None:
        raise UserError(f"no user {name!r} (`users list` shows them)")
    return row


def _keep_an_admin(conn, name: str) -> None:
    """Refuse to leave no active admin. FOR UPDATE on PostgreSQL: two admins demoting or revoking each other at
    once take turns, and the second sees the first's change (SQLite's writers take turns already: BEGIN IMMEDIATE;
    tests/labelstore/test_labelstore_users.py fails on PostgreSQL without it)."""
    admins = conn.execute(sa.select(users.c.id).where(
        users.c.role == "admin", users.c.revoked_at.is_(None), users.c.token_hash.is_not(None))
        .with_for_update()).all()
    if len(admins) <= 1:
        raise UserError(f"{name!r} is the last active admin: make another person admin first")


def set_role(engine: sa.Engine, name: str, role: str) -> str:
    """Give NAME the role ROLE; returns the role it had. Refused for the last active admin holding a token: the
    server would be left with nobody to add people or train in the UI (the CLI's `users add` is then the way back,
    and an --api-key holder is an admin the store does not know of)."""
    if role not in ROLES:
        raise UserError(f"role {role!r} is not one of {', '.join(ROLES)}")

    def change(conn):
        row = _person(conn, name)
        if row.role == "admin" and role != "admin" and row.revoked_at is None:
            _keep_an_admin(conn, name)
        conn.execute(users.update().where(users.c.id == row.id).values(role=role))
        return row.role

    return tx.run(engine, change)


def list_users(engine: sa.Engine) -> list[dict]:
    rows = tx.read(engine, lambda conn: conn.execute(
        sa.select(users.c.name, users.c.role, users.c.created_at, users.c.revoked_at)
        .where(users.c.token_hash.is_not(None)).order_by(users.c.name)).all())
    return [dict(r._mapping) for r in rows]


def has_users(engine: sa.Engine) -> bool:
    """Any user with a token (revoked or not): the server is then a team server and asks who is calling."""
    return tx.read(engine, lambda conn: conn.execute(
        sa.select(users.c.id).where(users.c.token_hash.is_not(None)).limit(1)).first()) is not None


def by_token(engine: sa.Engine, token: str) -> tuple[int, str, str] | None:
    """(id, name, role) of the active user holding `token`; None for an unknown or revoked one."""
    row = tx.read(engine, lambda conn: conn.execute(
        sa.select(users.c.id, users.c.name, users.c.role)
        .where(users.c.token_hash == token_hash(token), users.c.revoked_at.is_(None))).first())
    return tuple(row) if row else None


def token_table(engine: sa.Engine) -> tuple[dict[str, tuple[int, str, str]], bool]:
    """{token hash: (id, name, role)} of the active users, and whether any user (revoked too) exists: the
    server keeps this in memory and reads it again every second, one read for all requests."""
    rows = tx.read(engine, lambda conn: conn.execute(
        sa.select(users.c.id, users.c.name, users.c.role, users.c.token_hash, users.c.revoked_at)
        .where(users.c.token_hash.is_not(None))).all())
    return {r.token_hash: (r.id, r.name, r.role) for r in rows if r.revoked_at is None}, bool(rows)


def builtin(engine: sa.Engine, name: str) -> tuple[int, str, str]:
    """The built-in admin identity `name` (LOCAL or API_KEY), made on first use; no token can name it."""
    def get(conn):
        row = conn.execute(sa.select(users.c.id).where(users.c.name == name)).first()
        if row is None:
            row = conn.execute(users.insert().values(name=name, role="admin", created_at=time.time())
                               .returning(users.c.id)).first()
        return row[0]

    return tx.run(engine, get), name, "admin"
