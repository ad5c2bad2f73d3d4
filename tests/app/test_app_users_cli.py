"""`python -m app users ...` and the store checks at start: a token shown once and stored hashed, and a
database that cannot be used refused in one line naming the host, never the password."""

from __future__ import annotations

from app.__main__ import main
from app.config import parse_args
from labelstore import open_store, users


def test_users_add_list_revoke_token(tmp_path, capsys):
    assert main(["users", "add", "ann", "--role", "annotator", "--data-dir", str(tmp_path)]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    assert users.by_token(engine, token)[1:] == ("ann", "annotator")
    assert main(["users", "--data-dir", str(tmp_path), "add", "ann", "--role", "admin"]) == 2  # flags before too
    assert "exists" in capsys.readouterr().err
    assert main(["users", "revoke", "ann", "--data-dir", str(tmp_path)]) == 0
    assert users.by_token(engine, token) is None
    assert main(["users", "list", "--data-dir", str(tmp_path)]) == 0
    assert "ann\tannotator" in capsys.readouterr().out and "revoked" not in token
    assert main(["users", "token", "ann", "--data-dir", str(tmp_path)]) == 0
    fresh = capsys.readouterr().out.strip().splitlines()[-1]
    assert users.by_token(engine, fresh) is not None
    engine.dispose()


def test_users_role_changes_a_role_and_keeps_the_last_admin(tmp_path, capsys):
    """`users role NAME --role R` as the People panel's *Set role*: the last active admin stays one."""
    d = ["--data-dir", str(tmp_path)]
    for name, role in (("ann", "annotator"), ("boss", "admin")):
        assert main(["users", "add", name, "--role", role, *d]) == 0
    assert main(["users", "role", "ann", "--role", "admin", *d]) == 0
    assert "'ann': annotator -> admin" in capsys.readouterr().out
    assert main(["users", "role", "boss", "--role", "reviewer", *d]) == 0
    assert main(["users", "role", "ann", "--role", "annotator", *d]) == 2
    assert "last active admin" in capsys.readouterr().err
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    assert {u["name"]: u["role"] for u in users.list_users(engine)} == {"ann": "admin", "boss": "reviewer"}
    engine.dispose()


def test_an_unreachable_database_stops_the_server_at_start_in_one_line(tmp_path, capsys):
    code = main(["--model", str(tmp_path / "unused"), "--data-dir", str(tmp_path),
                 "--database-url", "postgresql+psycopg://team:s3cr3t-pw@127.0.0.1:1/labels"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "127.0.0.1:1" in err and "s3cr3t-pw" not in err


def test_database_url_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://h/db")
    assert parse_args([]).store_url == "postgresql+psycopg://h/db"
    monkeypatch.delenv("DATABASE_URL")
    assert parse_args(["--data-dir", str(tmp_path)]).store_url == f"sqlite:///{tmp_path.resolve() / 'app.db'}"
