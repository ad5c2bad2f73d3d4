"""Server settings: one frozen dataclass, built from the command line (and ELECTRA_API_KEY).

Every limit lives here with its default, so the README, `--help` and the tests read the same numbers.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from app.http.origin import cors_origin_problem
from serving.engine import GPU_BATCH_TOKENS, PassSize
from textdata.flags import Flag, parser_for

API_KEY_ENV = "ELECTRA_API_KEY"
DATABASE_URL_ENV = "DATABASE_URL"
# Padded tokens per engine pass when --engine-batch-tokens is not given: on CPU every padded token costs
# as much as a real one; a GPU computes a wide pass in about the time of a narrow one (the engine's default).
CPU_PASS_TOKENS, GPU_PASS_TOKENS = 512, GPU_BATCH_TOKENS


def quantized(cfg: Config) -> bool | None:
    """`Classifier.load(quantized=...)`: --fp32/--int8 force a file; neither lets export_report.json decide."""
    return False if cfg.fp32 else True if cfg.int8 else None


def pass_size(cfg: Config) -> int | PassSize:
    """--engine-batch-tokens, or the server's size per device, for `Classifier.load`; the engine settles it
    once it knows its device, and the server reads `clf.batch_tokens`."""
    return cfg.engine_batch_tokens or PassSize(cpu=CPU_PASS_TOKENS, gpu=GPU_PASS_TOKENS)


def loopback_only(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_to_anyone(cfg: Config) -> bool:
    """No --api-key, not loopback-only, no --allow-admin: anyone who reaches the server is a visitor. Such a
    server classifies and labels, but shows no labeled or kept texts (the registry, jobs, kept texts)."""
    return not (cfg.api_key or cfg.allow_admin or loopback_only(cfg.host))


def kept_texts_refusal(cfg: Config) -> str | None:
    """Why --audit-rate / --review-queue / --fallback-url cannot run on this server, or None. The texts they keep
    are other clients' (a sampled "PRIVATE: patient ... has HIV" was readable by anyone from the Monitor tab), and
    showing them to a person is their point: on a server open to anyone they would be shown to anyone. The
    cascade keeps them too (DATA_DIR/teacher), pays for each, and makes each LLM answer a training row of the
    next retrain: on an open server anyone could write the model's training data (issue 63, M5)."""
    flags = [f for f, on in (("--audit-rate", cfg.audit_rate > 0), ("--review-queue", cfg.review_queue),
                             ("--fallback-url", bool(cfg.fallback_url))) if on]
    if not flags or not open_to_anyone(cfg):
        return None
    return (f"{' and '.join(flags)} keep texts clients sent (the cascade also pays an LLM for them and trains the "
            f"next version on its answers), and this server has no --api-key and listens on {cfg.host}: anyone who "
            f"can reach it could read them or steer them. Give --api-key KEY (or {API_KEY_ENV}), listen on "
            f"127.0.0.1, or pass --allow-admin to let anyone who can reach it do so")


@dataclass(frozen=True)
class Config:
    model: str | None = None  # registered as a version; None: serve the registry's active version
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    # Engine
    provider: str = "auto"
    max_length: int | None = None
    threads: int | None = None
    fp32: bool = False  # use model.onnx even where the export made model_quantized.onnx the CPU default
    int8: bool = False  # use model_quantized.onnx even where the export kept model.onnx the CPU default
    blend: bool = True  # apply the model folder's TF-IDF blend when it has one (baseline/blend.py)
    # Padded tokens per forward pass inside the engine. A batch is padded to its longest text, so with
    # mixed lengths a large budget on CPU pays for padding; GPUs want it large. None: by device.
    engine_batch_tokens: int | None = None
    # Micro-batching (app/http/batcher.py): a free engine takes every waiting request up to max_batch_tokens and runs
    # at once; what arrives meanwhile forms the next batch. max_wait_ms > 0: a batch starting on an idle engine
    # waits that long for company (5 ms of it was 6.5 of the 11 ms one text took, issue 44). With batching off
    # every request is its own forward pass (the baseline).
    batching: bool = True
    max_batch_tokens: int = 8192
    max_wait_ms: float = 0.0
    workers: int = 1
    # Limits
    max_queue: int = 512  # texts waiting for the engine; beyond it requests get 429
    max_texts: int = 64
    max_chars: int = 5000
    max_body_bytes: int = 2 * 1024 * 1024
    request_timeout_s: float = 30.0
    shutdown_timeout_s: float = 30.0
    # Connections, enforced before auth (app/http/protocol.py): a request line + headers over max_header_bytes
    # gets 431; headers not complete within header_timeout_s get 408; a body that stops arriving for
    # body_timeout_s, or an idle keep-alive connection after keep_alive_s, is closed.
    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    cors_origins: tuple[str, ...] = field(default_factory=tuple)
    # Host names answered besides the loopback names and --host (app/http/origin.py); on 0.0.0.0 without any: all
    allowed_hosts: tuple[str, ...] = field(default_factory=tuple)
    # Proxies whose X-Forwarded-For / -Proto are trusted (the client address the auth throttle counts by)
    forwarded_allow_ips: tuple[str, ...] = field(default_factory=tuple)
    # UI
    ui: bool = True
    data_dir: Path = Path("app-data")
    # Team labeling's store (labelstore/): None is sqlite:///DATA_DIR/app.db; postgresql+psycopg://... for a team
    database_url: str | None = None
    max_upload_mb: float = 20.0
    max_upload_rows: int = 50_000
    upload_mb_per_minute: float = 100.0  # per client address, all upload requests together (app/http/upload_guard.py)
    ui_concurrency: int = 2
    log_level: str = "info"
    # The learning loop (app/versions/registry.py, app/versions/jobs.py)
    models_dir: Path | None = None  # None: <data_dir>/models
    allow_admin: bool = False  # train/activate/delete without --api-key on a non-loopback address
    train_data: Path | None = None  # a labeled base table trained on with the labeling sessions' decisions
    train_model: str | None = None  # the encoder a retrain starts from; None: the active version's own
    promote: str = "auto"
    promote_tolerance: float = 0.01  # macro-F1 a candidate may lose on the evaluation slice and still be promoted
    eval_share: float = 0.2  # share of labeled texts (by a hash of the text) kept out of every training table
    train_nice: int = 10  # the training child's niceness on CPU: the API keeps the cores it needs
    # A fleet (app/fleet/replica.py): the registry and its pointer in the database, promotions made by every replica at
    # once. On with a PostgreSQL --database-url, or --fleet (several processes on one SQLite file, one host).
    fleet: bool = False
    replica_id: str | None = None  # None: $REPLICA_ID, else HOSTNAME:PORT
    promote_timeout_s: float = 30.0
    model_store: str | None = None  # an fsspec URL holding the versions (app/fleet/model_store.py); --models-dir caches
    # "Not sure" answers routed to a person (app/labeling/review_queue.py): off by default, it stores users' texts.
    review_queue: bool = False
    review_queue_size: int = 1000
    # Monitoring (app/monitoring/monitor.py, app/labeling/audit.py): drift over the last monitor_window answers within
    # monitor_span_s, per version; audit_rate > 0 keeps a sample of served texts for a blind audit.
    monitor: bool = True
    monitor_window: int = 1000
    monitor_span_s: float = 24 * 3600.0
    audit_rate: float = 0.0
    prior_correction: bool = False  # serve the class mix the monitor estimates where it moved (serving/prior.py)
    # The cascade (app/llm/fallback.py): 'not sure' answers go to an LLM at an OpenAI-compatible endpoint
    server_timing: bool = False  # a Server-Timing header on each answer (app/http/server_timing.py)
    lean_classify: bool = True  # POST /v1/classify's plain case answered before FastAPI (app/http/lean.py)
    fallback_url: str | None = None
    fallback_model: str | None = None
    fallback_prompt: Path | None = None
    fallback_concurrency: int = 4
    fallback_timeout_s: float = 10.0
    fallback_price_per_1k_input: float = 0.0
    fallback_price_per_1k_output: float = 0.0
    # Paid LLM calls one client (a user, the --api-key holder, or an address) may cause per UTC day: every answer
    # the LLM gives becomes a teacher row of the next retrain, and the client chose the text (issue 63, M5)
    fallback_client_calls: int = 2000

    @property
    def store_url(self) -> str:
        from labelstore import default_url

        return self.database_url or default_url(self.data_dir)

    @property
    def in_fleet(self) -> bool:
        return self.fleet or (self.database_url or "").startswith("postgresql")

    @property
    def registry_dir(self) -> Path:
        return Path(self.models_dir) if self.models_dir else Path(self.data_dir) / "models"

    def __post_init__(self):
        if self.api_key is not None and not self.api_key.strip():
            # `--api-key "$KEY"` with KEY unset would otherwise serve without auth, silently.
            raise ValueError("the API key is empty (an unset variable?): give a key, or leave --api-key and "
                             f"{API_KEY_ENV} out to serve without auth")


FLAGS = {
    "model": Flag("ONNX export folder (serving.export) or transformers model folder; registered in --models-dir "
                  "as a new version unless already there", shown="the active version in --models-dir"),
    "host": Flag("address to listen on"),
    "port": Flag("port to listen on"),
    "api_key": Flag("require 'Authorization: Bearer KEY' on the API and the UI",
                    shown=f"${API_KEY_ENV}, else no auth"),
    "provider": Flag("ONNX Runtime provider: auto, cpu, cuda"),
    "max_length": Flag("truncate texts to this many tokens", shown="the training length"),
    "threads": Flag("engine intra-op threads", shown="the engine's choice"),
    "fp32": Flag("use model.onnx even where export_report.json makes model_quantized.onnx the CPU default"),
    "int8": Flag("use model_quantized.onnx even where export_report.json keeps model.onnx the CPU default "
                 "(INT8 was not faster on the CPU that exported it)"),
    "blend": Flag("serve the model alone where the folder has a TF-IDF blend (applied by default)"),
    "engine_batch_tokens": Flag("padded tokens per forward pass",
                                shown=f"{CPU_PASS_TOKENS} on CPU, {GPU_PASS_TOKENS} on a GPU"),
    "batching": Flag("one forward pass per request"),
    "max_batch_tokens": Flag("tokens a micro-batch closes at"),
    "max_wait_ms": Flag("milliseconds a batch that starts on an idle engine waits for more requests (0: it runs at "
                       "once; under load batches form while the engine is busy either way)"),
    "workers": Flag("batches run at once (engine threads)"),
    "max_queue": Flag("texts waiting before requests get 429"),
    "max_texts": Flag("texts per request"),
    "max_chars": Flag("characters per text"),
    "max_body_bytes": Flag("request body size; beyond it 413"),
    "request_timeout_s": Flag("seconds a request may wait for its predictions", name="--request-timeout"),
    "shutdown_timeout_s": Flag("seconds in-flight requests get on shutdown", name="--shutdown-timeout"),
    "max_header_bytes": Flag("request line + headers; beyond it 431"),
    "header_timeout_s": Flag("seconds to receive a request's headers; then 408 and the connection is closed",
                             name="--header-timeout"),
    "body_timeout_s": Flag("seconds a request body may stall; then the connection is closed", name="--body-timeout"),
    "keep_alive_s": Flag("seconds an idle keep-alive connection stays open", name="--keep-alive"),
    "cors_origins": Flag("allow this browser origin (repeatable); CORS is off without it", name="--cors-origin",
                         repeat=True),
    "allowed_hosts": Flag("a Host name the server answers to besides the loopback names and --host (repeatable); "
                          "others get 421", name="--allowed-host", repeat=True,
                          shown="loopback names and --host; any on 0.0.0.0 / ::"),
    "forwarded_allow_ips": Flag("trust X-Forwarded-For/-Proto from this proxy address (repeatable; '*': any)",
                                shown="none: the connection's address counts", repeat=True),
    "ui": Flag("API only, no web UI"),
    "data_dir": Flag("where the UI keeps labeling sessions"),
    "database_url": Flag("the label store: sqlite:///FILE or postgresql+psycopg://USER:PASSWORD@HOST/DB",
                         shown=f"${DATABASE_URL_ENV}, else sqlite:///DATA_DIR/app.db"),
    "max_upload_mb": Flag("UI upload size: per file, and all files of one upload request together"),
    "max_upload_rows": Flag("UI upload rows"),
    "upload_mb_per_minute": Flag("MB one client address may upload to the UI per minute; beyond it 429"),
    "ui_concurrency": Flag("UI scoring jobs (label upload, batch) running at once"),
    "log_level": Flag("debug, info, warning or error"),
    "models_dir": Flag("the model registry: versions v1, v2, ... and the active pointer", shown="DATA_DIR/models"),
    "allow_admin": Flag("allow train/activate/delete, reading the registry, jobs and kept texts (--audit-rate, "
                        "--review-queue) without --api-key on a non-loopback --host"),
    "train_data": Flag("labeled table (text,label) every retrain uses besides the labeling sessions"),
    "train_model": Flag("encoder a retrain fine-tunes (a transformers folder or kfold.py alias)",
                        shown="the one the active version was trained from"),
    "promote": Flag("auto: activate a retrained version unless worse on the evaluation slice; manual: keep it a "
                    "candidate", choices=("auto", "manual")),
    "promote_tolerance": Flag("macro-F1 (0-1) a candidate may lose against the active version and be promoted"),
    "eval_share": Flag("share of labeled texts kept out of every training table to score versions on "
                       "(fixed in the registry at first use)"),
    "monitor": Flag("no drift monitoring (/v1/monitor, the Monitor tab, app_drift in /metrics)"),
    "monitor_window": Flag("answers per model version the drift statistics are computed over"),
    "monitor_span_s": Flag("seconds an answer stays in the drift window", name="--monitor-span"),
    "audit_rate": Flag("share of served texts sampled (deduplicated, bounded) for a blind audit in the Label "
                       "tab, which gives live precision; it keeps texts users sent (0: off)", metavar="RATE"),
    "prior_correction": Flag("correct single-label scores to the class mix the monitor estimates over its window, "
                             "while its test says the mix moved from the training mix (Saerens et al. 2002); "
                             "answers then depend on recent traffic"),
    "train_nice": Flag("niceness of the training process"),
    "review_queue": Flag("keep the texts the API answers 'not sure' (under the model's threshold) in the label store "
                         "for the Label tab; stores users' texts"),
    "server_timing": Flag("answer each request with a Server-Timing header: milliseconds of tokenizing, queue, "
                          "engine, model pass and the whole request inside the server (bench/stage_report.py reads "
                          "it; it tells clients how busy the server is)"),
    "lean_classify": Flag("send every POST /v1/classify through FastAPI's route and validation, not only the "
                          "ones the lean path (app/http/lean.py) leaves to it; the same answers, slower"),
    "fallback_url": Flag("send answers under the model's threshold ('not sure') to the LLM at this OpenAI-compatible "
                         "endpoint (key: $OPENAI_API_KEY); its answers come back with source 'llm' and are kept "
                         "as teacher labels in DATA_DIR/teacher (pip install -e '.[llm]')", metavar="URL"),
    "fallback_model": Flag("--fallback-url: the LLM's name there", metavar="NAME"),
    "fallback_prompt": Flag("--fallback-url: a prompt file holding {text} and {labels}", metavar="FILE"),
    "fallback_concurrency": Flag("--fallback-url: LLM requests in flight at once"),
    "fallback_timeout_s": Flag("--fallback-url: seconds to wait for the LLM; then the model's answer is returned "
                               "(confident: false)", name="--fallback-timeout"),
    "fallback_price_per_1k_input": Flag("--fallback-url: price per 1,000 prompt tokens, for the cost in /v1/monitor"),
    "fallback_price_per_1k_output": Flag("--fallback-url: price per 1,000 answer tokens"),
    "fallback_client_calls": Flag("--fallback-url: paid LLM calls one client (a user, the --api-key holder, an "
                                  "address) may cause per UTC day; past it its 'not sure' answers stay the model's "
                                  "(0: no cap). Each LLM answer is a training row of the next retrain",
                                  metavar="N"),
    "fleet": Flag("keep the model registry and its active pointer in the database and promote across every "
                  "replica sharing it (on by itself with a PostgreSQL --database-url)"),
    "replica_id": Flag("this replica's name in the fleet", shown="$REPLICA_ID, else HOSTNAME:PORT"),
    "promote_timeout_s": Flag("seconds a promotion waits for every live replica to load and check the new "
                              "version; then it commits without (evicting) those not ready", name="--promote-timeout"),
    "review_queue_size": Flag("texts the review queue holds; when full the oldest is dropped"),
    "model_store": Flag("a fleet's versions in this fsspec URL (s3://bucket/prefix, gs://..., file:///...; install "
                        "its backend, e.g. s3fs), each checked against its sha256 when fetched; --models-dir is then "
                        "this process's cache", shown="--models-dir itself", metavar="URL"),
}


def build_parser() -> argparse.ArgumentParser:
    return parser_for(Config, "python -m app", "Serve an ELECTRA classifier: JSON API and labeling UI.", FLAGS)


def parse_args(argv: list[str] | None = None) -> Config:
    p = build_parser()
    a = p.parse_args(argv)
    if not 0 < a.eval_share < 1:
        p.error("--eval-share must be a fraction in (0, 1), e.g. 0.2")
    if a.fp32 and a.int8:
        p.error("--fp32 and --int8: choose one (neither: the file export_report.json names for CPU)")
    if a.engine_batch_tokens is not None and a.engine_batch_tokens < 1:
        p.error("--engine-batch-tokens must be at least 1")
    for name in ("max_batch_tokens", "workers", "max_queue", "max_texts", "max_chars", "max_body_bytes",
                 "max_upload_rows", "ui_concurrency", "max_header_bytes", "review_queue_size"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= a.max_wait_ms <= 1000 * a.request_timeout_s:
        p.error(f"--max-wait-ms {a.max_wait_ms:g}: use milliseconds from 0 (an idle engine runs a request at once) "
                f"to the request timeout ({1000 * a.request_timeout_s:g} ms, --request-timeout)")
    if not 0 <= a.audit_rate <= 1:
        p.error(f"--audit-rate must be a share in [0, 1] (0.05: one text in 20), not {a.audit_rate}")
    if a.monitor_window < 1 or not a.monitor_span_s > 0:
        p.error("--monitor-window must be at least 1 and --monitor-span positive (or turn it off: --no-monitor)")
    for flag, value in (("--header-timeout", a.header_timeout_s), ("--body-timeout", a.body_timeout_s),
                        ("--keep-alive", a.keep_alive_s), ("--upload-mb-per-minute", a.upload_mb_per_minute)):
        if not value > 0:
            p.error(f"{flag} must be positive")
    check_fallback(p, a)
    values = vars(a)
    key = a.api_key if a.api_key is not None else os.environ.get(API_KEY_ENV)
    if key is not None and not key.strip():
        where = "--api-key" if a.api_key is not None else f"the environment variable {API_KEY_ENV}"
        p.error(f"{where} is empty (an unset variable?): give a key, or leave it out to serve without auth")
    values["api_key"] = key
    values["database_url"] = a.database_url or os.environ.get(DATABASE_URL_ENV) or None
    values["cors_origins"] = tuple(a.cors_origins)
    for why in filter(None, map(cors_origin_problem, a.cors_origins)):
        p.error(f"--cors-origin: {why}")
    values["allowed_hosts"] = tuple(a.allowed_hosts)
    values["forwarded_allow_ips"] = tuple(a.forwarded_allow_ips)
    cfg = Config(**values)
    if cfg.model_store and not cfg.in_fleet:
        p.error("--model-store is a fleet's: give a PostgreSQL --database-url or --fleet as well")
    why = kept_texts_refusal(cfg)
    if why:
        p.error(why)
    return cfg


def check_fallback(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """--fallback-url needs a model and a prompt that holds the text and the label list (refused at start)."""
    if not a.fallback_url:
        return
    if not a.fallback_model or not a.fallback_prompt:
        p.error("--fallback-url needs --fallback-model NAME and --fallback-prompt FILE")
    if a.fallback_concurrency < 1 or not a.fallback_timeout_s > 0 or a.fallback_client_calls < 0:
        p.error("--fallback-concurrency must be at least 1, --fallback-timeout positive and "
                "--fallback-client-calls 0 or more")
    from textdata.errors import UsageError
    from textdata.llm import read_prompt

    try:
        read_prompt(str(a.fallback_prompt))
    except UsageError as e:
        p.error(f"--fallback-prompt {e}")
