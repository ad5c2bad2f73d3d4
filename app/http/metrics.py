"""Prometheus metrics, in a registry per app so two servers in one process (tests) never collide."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

# The *_created series double the output and no dashboard reads them.
disable_created_metrics()

ENDPOINTS = {"/v1/monitor", "/v1/classify", "/", "/predict", "/v1/labels", "/v1/model", "/healthz", "/readyz", "/metrics", "/login",
             "/v1/models", "/v1/train", "/v1/jobs"}


def endpoint_label(path: str) -> str:
    """A fixed set of label values: arbitrary paths from scanners must not grow the series count."""
    if path in ENDPOINTS:
        return path
    for prefix in ("/v1/models/", "/v1/jobs/"):  # version and job ids stay out of the label values
        if path.startswith(prefix):
            return prefix[:-1]
    if path == "/ui" or path.startswith("/ui/"):
        return "/ui"
    return "other"


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("app_requests_total", "HTTP requests by endpoint and status code",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("app_request_duration_seconds", "HTTP request latency", ["endpoint"], registry=r,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.batch_size = Histogram("app_batch_size_texts", "Texts per engine call", registry=r,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        self.batch_tokens = Histogram("app_batch_tokens", "Tokens per engine call", registry=r,
                                      buckets=(16, 64, 256, 1024, 4096, 8192, 16384, 65536))
        self.batch_seconds = Histogram("app_batch_duration_seconds", "Engine time per batch", registry=r,
                                       buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10))
        self.queue_depth = Gauge("app_queue_depth_texts", "Texts waiting for the engine", registry=r)
        self.texts = Counter("app_texts_classified_total", "Texts classified through the API and UI", registry=r)
        self.model_info = Gauge("app_model_info", "The model version serving now (1)", ["version"], registry=r)
        self.rejected = Counter("app_rejected_total", "Requests turned away before the engine", ["reason"],
                                registry=r)
        self.not_confident = Counter("app_not_confident_total", "Answers under the model's threshold (API, UI Classify and Batch) "
                                     "('not sure', calibration.json)", registry=r)
        self.review_queue = Gauge("app_review_queue_texts", "'Not sure' texts waiting in the review queue "
                                  "(--review-queue)", registry=r)
        self.drift = Gauge("app_drift", "Population stability index of the served window against the version's "
                           "reference (textdata/drift.py)", ["kind", "version"], registry=r)
        self.audit_queue = Gauge("app_audit_queue_texts", "Sampled texts waiting for the live audit", registry=r)

    def set_drift(self, snapshot: dict) -> None:
        self.drift.clear()
        for version, v in snapshot["versions"].items():
            for kind, value in (v.get("drift") or {}).items():
                self.drift.labels(kind, version).set(value)
        self.audit_queue.set(snapshot.get("audit_queue", 0))

    def observe_batch(self, n_texts: int, tokens: int, seconds: float) -> None:
        self.batch_size.observe(n_texts)
        self.batch_tokens.observe(tokens)
        self.batch_seconds.observe(seconds)
        self.texts.inc(n_texts)

    def set_model(self, version: str) -> None:
        self.model_info.clear()
        self.model_info.labels(version).set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)
