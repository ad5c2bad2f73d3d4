"""deploy/k8s as a cluster would receive it, checked offline (no cluster here): `kubectl kustomize` renders it
(kustomize is built into kubectl; without kubectl the files are read one by one), every object validates
against the Kubernetes schemas kubernetes-validate bundles (strict: an unknown field fails), and the objects
say what docs/deploy.md promises: three replicas ready on /readyz and alive on /healthz, one trainer that is
never two, a shared model store, the secrets from one Secret, container arguments `python -m app` accepts."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# the oldest release still common in managed clusters, and the newest the tool knows
VERSIONS = ("1.29.0", max(kv.utils.all_versions(), key=lambda v: tuple(map(int, v.split(".")))))
SECRET_KEYS = {"POSTGRES_PASSWORD", "DATABASE_URL", "ELECTRA_API_KEY"}


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:  # the files themselves; the Secret is what secretGenerator would make
        docs = [d for f in sorted(K8S.glob("*.yaml")) if f.name != "kustomization.yaml"
                for d in yaml.safe_load_all(f.read_text(encoding="utf-8")) if d]
        return docs + [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "electra-secrets"},
                        "stringData": dict.fromkeys(SECRET_KEYS, "x")}]
    work = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(K8S, work, ignore=shutil.ignore_patterns("secrets.env"))
    (work / "secrets.env").write_text("".join(f"{k}=x\n" for k in sorted(SECRET_KEYS)), encoding="utf-8")
    out = subprocess.run([kubectl, "kustomize", str(work)], check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _hashed(o: dict, name: str) -> list[str]:
    rest = o["metadata"]["name"].removeprefix(name + "-")
    return [o["metadata"]["name"]] if o["kind"] == "Secret" and rest.isalnum() and len(rest) == 10 else []


def find(objects: list[dict], kind: str, name: str) -> dict:
    """The object by name; kustomize names a generated Secret NAME-<hash>."""
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] in (name, *_hashed(o, name))]
    assert len(hits) == 1, f"{kind} {name}: {len(hits)} found"
    return hits[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly(objects, version):
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(["Namespace", "Secret", "Service", "Service", "Service", "PersistentVolumeClaim",
                            "Deployment", "Deployment", "StatefulSet", "PodDisruptionBudget", "Ingress", "Ingress"])
    for o in objects:
        kv.validate(o, version, strict=True)


def test_the_validation_bites(objects):
    """A misspelt probe and a string where a number belongs are refused: the check above can fail."""
    d = copy.deepcopy(find(objects, "Deployment", "electra"))
    c = d["spec"]["template"]["spec"]["containers"][0]
    c["readinesProbe"] = c.pop("readinessProbe")
    with pytest.raises(kv.utils.ValidationError):
        kv.validate(d, VERSIONS[0], strict=True)
    d = copy.deepcopy(find(objects, "Deployment", "electra"))
    d["spec"]["replicas"] = "three"
    with pytest.raises(kv.utils.ValidationError):
        kv.validate(d, VERSIONS[0], strict=True)


def _container(o: dict) -> dict:
    return o["spec"]["template"]["spec"]["containers"][0]


def test_replicas_probe_ready_and_alive_with_resources(objects):
    d = find(objects, "Deployment", "electra")
    assert d["spec"]["replicas"] == 3
    c = _container(d)
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    svc = find(objects, "Service", "electra")
    assert svc["spec"]["selector"] == d["spec"]["selector"]["matchLabels"]


def test_one_trainer_never_two(objects):
    t = find(objects, "Deployment", "electra-trainer")
    assert t["spec"]["replicas"] == 1 and t["spec"]["strategy"]["type"] == "Recreate"
    assert _container(t)["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_model_store_is_shared_and_mounted_where_the_args_say(objects):
    pvc = find(objects, "PersistentVolumeClaim", "electra-models")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    for name in ("electra", "electra-trainer"):
        d = find(objects, "Deployment", name)
        c, vols = _container(d), d["spec"]["template"]["spec"]["volumes"]
        assert {"name": "models", "persistentVolumeClaim": {"claimName": "electra-models"}} in vols
        mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "models")
        assert c["args"][c["args"].index("--models-dir") + 1] == mount


def test_secrets_come_from_the_generated_secret(objects):
    secret = find(objects, "Secret", "electra-secrets")
    have = set(secret.get("data") or secret.get("stringData"))
    assert have == SECRET_KEYS
    for kind, name in (("Deployment", "electra"), ("Deployment", "electra-trainer"), ("StatefulSet", "electra-postgres")):
        for env in _container(find(objects, kind, name))["env"]:
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:  # the generated name (with kustomize's hash suffix) and a key it has
                assert ref["name"] == secret["metadata"]["name"] and ref["key"] in have, (name, ref)


def test_container_arguments_are_what_the_app_accepts(objects):
    """With the image's ENTRYPOINT (it named --model /model, which only the trainer's image holds)."""
    from dockerfile_argv import app_argv

    from app.config import parse_args

    cfg = {}
    for name in ("electra", "electra-trainer"):
        c = _container(find(objects, "Deployment", name))
        cfg[name] = parse_args(app_argv(c.get("command"), c.get("args")))
        assert cfg[name].port == 8000 and cfg[name].host == "0.0.0.0", name
    assert cfg["electra"].model is None and cfg["electra-trainer"].model == "/model"


def test_the_trainer_migrates_the_schema_before_it_starts_and_replicas_never_do(objects):
    """Replicas refuse an older schema (app/fleet/db_cli.py); the single trainer's init container migrates it."""
    init = find(objects, "Deployment", "electra-trainer")["spec"]["template"]["spec"]["initContainers"]
    assert [c["command"] for c in init] == [["python", "-m", "app", "db", "upgrade"]]
    assert init[0]["env"][0]["name"] == "DATABASE_URL" and init[0]["image"] == _container(
        find(objects, "Deployment", "electra-trainer"))["image"]
    replicas = find(objects, "Deployment", "electra")["spec"]["template"]["spec"]
    assert all("db" not in (c.get("command") or []) for c in replicas.get("initContainers", []) + replicas["containers"])
