"""People on SQLite and on a real PostgreSQL: the last active admin can be neither demoted nor revoked (issue 59:
nobody would be left to add people or train in the UI), also when the last two admins act at the same moment."""

from __future__ import annotations

import threading

import pytest

from labelstore import open_store, users


@pytest.fixture
def engine(store_url):
    engine = open_store(store_url)
    yield engine
    engine.dispose()


def roles(engine) -> dict:
    return {u["name"]: (u["role"], u["revoked_at"] is None) for u in users.list_users(engine)}


def test_the_last_active_admin_cannot_be_revoked(engine):
    users.add_user(engine, "boss", "admin")
    users.add_user(engine, "ann", "annotator")
    with pytest.raises(users.UserError, match="'boss' is the last active admin"):
        users.revoke(engine, "boss")
    users.revoke(engine, "ann")  # anyone else may go
    users.add_user(engine, "cleo", "admin")
    users.revoke(engine, "boss")  # two admins: one may go
    assert roles(engine) == {"boss": ("admin", False), "ann": ("annotator", False), "cleo": ("admin", True)}
    with pytest.raises(users.UserError, match="last active admin"):
        users.revoke(engine, "cleo")
    with pytest.raises(users.UserError, match="no user 'nobody'"):
        users.revoke(engine, "nobody")


@pytest.mark.parametrize("first, second", [("revoke", "revoke"), ("revoke", "demote"), ("demote", "demote")])
def test_the_last_two_admins_leaving_at_once_leave_one(engine, first, second):
    """Each checks that another admin stays, then acts: without the row lock both would see two and both act."""
    users.add_user(engine, "ana", "admin")
    users.add_user(engine, "bo", "admin")
    act = {"revoke": lambda name: users.revoke(engine, name),
           "demote": lambda name: users.set_role(engine, name, "reviewer")}
    start, refused = threading.Barrier(2), []

    def leave(name, how):
        start.wait()
        try:
            act[how](name)
        except users.UserError as e:
            refused.append(str(e))

    threads = [threading.Thread(target=leave, args=("ana", first)), threading.Thread(target=leave, args=("bo", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    active_admins = [n for n, (role, active) in roles(engine).items() if role == "admin" and active]
    assert len(active_admins) == 1 and len(refused) == 1 and "last active admin" in refused[0]
