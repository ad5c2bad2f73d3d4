"""`python -m app db upgrade|current` (app/fleet/db_cli.py), and the schema rule at start: a fleet's replica never
migrates (an older schema stops it in one line naming the command), a server alone on SQLite does."""

from __future__ import annotations

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
