"""What a replica adds to the server it runs in: the switcher (app/fleet/replica.py), a gate that keeps a stale replica
out of rotation, the fleet's monitor section and per-replica series in /metrics."""

from __future__ import annotations

import time

from fastapi import FastAPI
from prometheus_client.core import GaugeMetricFamily
from starlette.responses import JSONResponse

OPEN_PATHS = ("/healthz", "/readyz", "/metrics", "/v1/monitor", "/v1/models", "/v1/jobs", "/login", "/logout")


def attach(app: FastAPI, state, metrics, switcher) -> None:
    replica = switcher.replica
    app.add_middleware(StaleGate, replica=replica)
    metrics.registry.register(ReplicaCollector(replica))
    if state.monitor is not None:
        own = state.monitor.report
        # the route in app/http/api.py returns the monitor's report: the fleet's section joins it there
        state.monitor.report = lambda: {**own(), "fleet": fleet_monitor(replica)}


class StaleGate:
    """503 (Retry-After 1) on work while the replica serves a version that is no longer active: nginx's
    `proxy_next_upstream http_503` then answers from a replica that serves the active one."""

    def __init__(self, app, replica):
        self.app, self.replica = app, replica

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.replica.stale and not scope["path"].startswith(OPEN_PATHS):
            served = self.replica.state.served.version
            body = {"detail": f"replica {self.replica.id} still serves {served}, no longer the active version; "
                              "it is loading the active one: retry (another replica answers)",
                    "model_version": served}
            await JSONResponse(body, 503, headers={"Retry-After": "1"})(scope, receive, send)
            return
        await self.app(scope, receive, send)


class ReplicaCollector:
    """Series labeled by replica, read from the rows the replica refreshed with its last heartbeat."""

    def __init__(self, replica):
        self.replica = replica

    def collect(self):
        now = time.time()
        up = GaugeMetricFamily("app_fleet_replica_heartbeat_age_seconds", "Seconds since each replica's heartbeat",
                               labels=["replica"])
        serving = GaugeMetricFamily("app_fleet_replica_serving", "The version each replica serves (1)",
                                    labels=["replica", "version"])
        answers = GaugeMetricFamily("app_fleet_replica_answers", "Answers in each replica's monitor window, by version",
                                    labels=["replica", "version"])
        for r in self.replica.rows:
            up.add_metric([r["id"]], round(now - r["heartbeat_at"], 3))
            if r["serving"]:
                serving.add_metric([r["id"], r["serving"]], 1)
            for version, s in ((r.get("monitor") or {}).get("versions") or {}).items():
                answers.add_metric([r["id"], version], s.get("n") or 0)
        yield from (up, serving, answers)


def fleet_monitor(replica) -> dict:
    """Per replica (its window's counts and levels, as it last wrote them) and fleet-wide (answers summed)."""
    per, fleet = {}, {}
    for r in replica.rows:
        versions = (r.get("monitor") or {}).get("versions") or {}
        per[r["id"]] = {"serving": r["serving"], "heartbeat_age_s": round(time.time() - r["heartbeat_at"], 1),
                        "evicted": bool(r["evicted_at"]), "versions": versions}
        for version, s in versions.items():
            f = fleet.setdefault(version, {"n": 0, "total": 0, "replicas": 0, "alerts": set()})
            f["n"] += s.get("n") or 0
            f["total"] += s.get("total") or 0
            f["replicas"] += 1
            f["alerts"] |= set(s.get("alerts") or ())
    for f in fleet.values():
        f["alerts"] = sorted(f["alerts"])
    return {"replica": replica.id, "replicas": per, "fleet": fleet}
