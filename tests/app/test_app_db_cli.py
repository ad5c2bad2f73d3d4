"""`python -m app db upgrade|current` (app/fleet/db_cli.py), and the schema rule at start: a fleet's replica never
migrates (an older schema stops it in one line naming the command), a server alone on SQLite does."""

from __future__ import annotations

import pytest
from alembic import command

from app.__main__ import main
from labelstore.engine import _alembic, make_engine, revisions


def _old_store(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(_alembic(conn), "0003_kept_texts")
    engine.dispose()
    return url


def test_a_replica_on_an_older_schema_stops_in_one_line_until_db_upgrade(tmp_path, capsys):
    url = _old_store(tmp_path)
    replica = ["--model", str(tmp_path / "never-loaded"), "--data-dir", str(tmp_path), "--database-url", url,
               "--fleet", "--replica-id", "r1"]
    assert main(replica) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "older" in err and "python -m app db upgrade" in err
    assert revisions(make_engine(url))[0] == "0003_kept_texts"  # untouched

    assert main(["db", "current", "--database-url", url]) == 0
    assert "schema 0003_kept_texts" in capsys.readouterr().out
    assert main(["db", "upgrade", "--database-url", url]) == 0
    assert "was 0003_kept_texts" in capsys.readouterr().out
    current, head = revisions(make_engine(url))
    assert current == head
    assert main(["db", "upgrade", "--database-url", url]) == 0 and "(already)" in capsys.readouterr().out
    assert main(replica) == 2  # now it goes on, to the model folder (which does not exist)
    assert "no such model folder" in capsys.readouterr().err


def test_a_single_server_on_sqlite_still_migrates_at_start(tmp_path, capsys):
    url = _old_store(tmp_path)
    assert main(["--model", str(tmp_path / "never-loaded"), "--data-dir", str(tmp_path), "--database-url", url]) == 2
    assert "no such model folder" in capsys.readouterr().err  # past the store: migrated
    current, head = revisions(make_engine(url))
    assert current == head


def test_db_upgrade_on_a_url_it_cannot_use_is_one_line(capsys):
    assert main(["db", "upgrade", "--database-url", "nosuchdb://x"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def _damaged(tmp_path, how: str) -> str:
    """A store made by the app, then spoiled: random bytes, cut in half, or a table dropped by hand."""
    import os
    import sqlite3

    from labelstore import open_store, users

    path = tmp_path / "app.db"
    if how == "random bytes":
        path.write_bytes(os.urandom(64 * 1024))
        return f"sqlite:///{path}"
    engine = open_store(f"sqlite:///{path}")
    for i in range(2000):
        users.add_user(engine, f"user{i:04d}-" + "x" * 60, "annotator")
    engine.dispose()
    if how == "truncated":
        os.truncate(path, path.stat().st_size // 2)
    else:
        with sqlite3.connect(path) as conn:
            conn.execute("DROP TABLE label_events")
    return f"sqlite:///{path}"


DAMAGE = {"random bytes": "cannot be read (file is not a database)",
          "truncated": "cannot be read (database disk image is malformed)",
          "dropped table": "has schema fleet1 but no table label_events"}


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_or_altered_store_is_one_line_naming_the_file_in_every_command(tmp_path, capsys, how):
    """Issue 63 L4: a corrupt file gave a raw SQLAlchemy traceback (a 111-line one at the server's start), and a
    dropped table passed `db current`, `db upgrade` and the start, to answer 500 later."""
    url = _damaged(tmp_path, how)
    commands = [["db", "current"], ["db", "upgrade"], ["users", "list"], ["users", "add", "ann", "--role", "admin"],
                ["--model", str(tmp_path / "never-loaded"), "--data-dir", str(tmp_path)]]
    for argv in commands:
        assert main([*argv, "--database-url", url]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and DAMAGE[how] in err and str(tmp_path / "app.db") in err, (argv, err)
        assert "restore it from a backup" in err and "Traceback" not in err
