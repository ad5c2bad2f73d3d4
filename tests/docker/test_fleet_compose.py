"""compose.fleet.yaml and docker/nginx-fleet.conf agree with each other and with the app, read without Docker
(docker/fleet_smoke.sh runs them): every replica is ready on /readyz and shares the model store and the
database, each has the fixed address nginx is told, nginx balances over exactly those replicas and is the one
proxy they trust, and every command line is one `python -m app` accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
REPLICAS = ("replica1", "replica2", "replica3")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default} and ${VAR:?error}, with `env` as the environment."""
    def one(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        if name in env and (env[name] or op in ("-", "")):
            return env[name]
        if op.endswith("?"):
            raise KeyError(f"{name}: {arg}")
        return arg
    return re.sub(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}", one, text)


@pytest.fixture(scope="module")
def services() -> dict:
    env = {"POSTGRES_PASSWORD": "pw", "ELECTRA_API_KEY": "key"}
    return yaml.safe_load(interpolate((ROOT / "compose.fleet.yaml").read_text(encoding="utf-8"), env))["services"]


def test_required_secrets_are_required():
    with pytest.raises(KeyError, match="POSTGRES_PASSWORD"):
        interpolate((ROOT / "compose.fleet.yaml").read_text(encoding="utf-8"), {"ELECTRA_API_KEY": "key"})


def test_replicas_are_ready_on_readyz_and_share_store_and_database(services):
    for name in REPLICAS + ("trainer",):
        s = services[name]
        assert "/readyz" in " ".join(s["healthcheck"]["test"]), name
        assert "models:/data/models" in s["volumes"], name
        assert s["environment"]["DATABASE_URL"] == "postgresql+psycopg://electra:pw@postgres:5432/electra"
        assert s["depends_on"], name
    assert services["trainer"]["profiles"] == ["train"] and services["trainer"]["image"] == "electra-classify:full"
    assert len({services[n]["hostname"] for n in REPLICAS}) == 3


def test_command_lines_are_what_the_app_accepts(services):
    """The image's ENTRYPOINT counts: it named --model /model, which replica2/3 and the trainer do not mount."""
    from dockerfile_argv import app_argv

    from app.config import parse_args

    cfg = {n: parse_args(app_argv(services[n].get("entrypoint"), services[n]["command"]))
           for n in REPLICAS + ("trainer",)}
    for name, c in cfg.items():
        assert str(c.registry_dir) == "/data/models" and c.host == "0.0.0.0", name
        assert c.forwarded_allow_ips == (services["nginx"]["networks"]["fleet"]["ipv4_address"],), name
    assert cfg["replica1"].model == "/model" and "/model:ro" in services["replica1"]["volumes"][1]
    assert [cfg[n].model for n in ("replica2", "replica3", "trainer")] == [None] * 3  # the store's active version


def test_nginx_balances_over_exactly_the_replicas_at_their_fixed_addresses(services):
    conf = (ROOT / "docker" / "nginx-fleet.conf").read_text(encoding="utf-8")
    upstreams = dict(re.findall(r"upstream (\w+) \{(.*?)\}", conf, re.DOTALL))
    assert set(upstreams) == {"replicas", "replicas_ui"}
    for body in upstreams.values():  # each once, and again as a backup (tests/docker/test_fleet_nginx.py)
        assert re.findall(r"server (\w+):8000(?! backup)", body) == list(REPLICAS)
        assert re.findall(r"server (\w+):8000 backup", body) in ([], list(REPLICAS))
    hosts = dict(h.split(":", 1) for h in services["nginx"]["extra_hosts"])
    assert hosts == {n: services[n]["networks"]["fleet"]["ipv4_address"] for n in REPLICAS}
    assert "hash $remote_addr consistent" in upstreams["replicas_ui"]
    assert services["nginx"]["ports"] == ["8000:8080"] and "listen 8080;" in conf


def test_the_schema_is_migrated_once_before_any_replica_starts(services):
    """Replicas never migrate (app/fleet/db_cli.py): the one-shot `migrate` service does, and replica1 (which the
    others wait for) starts only once it exited 0."""
    from dockerfile_argv import app_argv

    m = services["migrate"]
    assert m["entrypoint"] == ["python", "-m", "app", "db", "upgrade"] and m["restart"] == "no"
    assert m["environment"]["DATABASE_URL"] == services["replica1"]["environment"]["DATABASE_URL"]
    assert m["image"] == services["replica1"]["image"]
    assert services["replica1"]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert app_argv(m["entrypoint"], m["command"])[:2] == ["db", "upgrade"]
