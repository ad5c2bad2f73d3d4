"""`python -m app users ...`: the people who label, review and administer, in the server's label store.

    python -m app users add NAME --role annotator|reviewer|admin [--data-dir DIR | --database-url URL]
    python -m app users list | revoke NAME | token NAME | role NAME --role annotator|reviewer|admin

`add` and `token` print the token once; only its hash is stored. The first user turns authentication on for
a running server within seconds (until then, a server on 127.0.0.1 without --api-key is one person's); so does
a role change. The last active admin cannot be made anything else (labelstore/users.py set_role).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa

from app.config import DATABASE_URL_ENV
from labelstore import StoreError, default_url, open_store, users
from labelstore.engine import unreadable
from labelstore.schema import ROLES


def _store_flags(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--data-dir", type=Path, default=default(Path("app-data")),
                        help="the server's --data-dir (default: app-data)")
    parser.add_argument("--database-url", default=default(None), help=(
        f"the server's --database-url (default: ${DATABASE_URL_ENV}, else sqlite:///DATA_DIR/app.db)"))


def build_parser() -> argparse.ArgumentParser:
    """The store flags are taken before or after the command (`users --data-dir D add ...` or `users add ... --data-dir D`)."""
    p = argparse.ArgumentParser("python -m app users", description="Manage the users of the label store.")
    _store_flags(p, lambda v: v)
    after = argparse.ArgumentParser(add_help=False)
    _store_flags(after, lambda v: argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="add a user; prints its token once", parents=[after])
    add.add_argument("name")
    add.add_argument("--role", choices=ROLES, required=True)
    sub.add_parser("list", help="users, roles, revoked or not", parents=[after])
    role = sub.add_parser("role", help="change a user's role (never the last active admin's)", parents=[after])
    role.add_argument("name")
    role.add_argument("--role", choices=ROLES, required=True)
    for name, text in (("revoke", "revoke a user's token (401 from now on)"), ("token", "issue a new token")):
        sub.add_parser(name, help=text, parents=[after]).add_argument("name")
    return p


def main(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    url = a.database_url or os.environ.get(DATABASE_URL_ENV) or default_url(a.data_dir)
    engine = None
    try:
        engine = open_store(url)
        if a.command == "add":
            token = users.add_user(engine, a.name, a.role)
            print(f"user {a.name!r} ({a.role}) added; token, shown once:\n{token}")
        elif a.command == "token":
            print(f"new token for {a.name!r}, shown once (the old one no longer works):\n{users.new_token(engine, a.name)}")
        elif a.command == "role":
            was = users.set_role(engine, a.name, a.role)
            print(f"user {a.name!r}: {was} -> {a.role}")
        elif a.command == "revoke":
            users.revoke(engine, a.name)
            print(f"user {a.name!r} revoked")
        else:
            for u in users.list_users(engine):
                when = datetime.fromtimestamp(u["created_at"], timezone.utc).strftime("%Y-%m-%d %H:%M")
                print(f"{u['name']}\t{u['role']}\t{when}\t{'revoked' if u['revoked_at'] else 'active'}")
    except (StoreError, users.UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except sa.exc.DatabaseError as e:  # damaged past what opening it reads (a page of the users table)
        print(f"error: {unreadable(e, sa.make_url(url))}", file=sys.stderr)
        return 2
    finally:
        if engine is not None:
            engine.dispose()
    return 0
