"""Server settings: one frozen dataclass, built from the command line (and ELECTRA_API_KEY).

Every limit lives here with its default, so the README, `--help` and the tests read the same numbers.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from serving.engine import GPU_BATCH_TOKENS

API_KEY_ENV = "ELECTRA_API_KEY"
# Padded tokens per engine pass when --engine-batch-tokens is not given: on CPU every padded token costs
# as much as a real one; a GPU computes a wide pass in about the time of a narrow one (the engine's default).
CPU_PASS_TOKENS, GPU_PASS_TOKENS = 512, GPU_BATCH_TOKENS


def pass_tokens(cfg: Config, provider: str) -> int:
    """--engine-batch-tokens, or the default for the device the engine runs on."""
    if cfg.engine_batch_tokens is not None:
        return cfg.engine_batch_tokens
    return CPU_PASS_TOKENS if provider == "cpu" else GPU_PASS_TOKENS


@dataclass(frozen=True)
class Config:
    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    # Engine
    provider: str = "auto"
    max_length: int | None = None
    threads: int | None = None
    fp32: bool = False  # use model.onnx even where model_quantized.onnx exists
    # Padded tokens per forward pass inside the engine. A batch is padded to its longest text, so with
    # mixed lengths a large budget on CPU pays for padding; GPUs want it large. None: by device.
    engine_batch_tokens: int | None = None
    # Micro-batching: a batch closes when its texts reach max_batch_tokens or its oldest request has
    # waited max_wait_ms. With batching off every request is its own forward pass (the baseline).
    batching: bool = True
    max_batch_tokens: int = 8192
    max_wait_ms: float = 5.0
    workers: int = 1
    # Limits
    max_queue: int = 512  # texts waiting for the engine; beyond it requests get 429
    max_texts: int = 64
    max_chars: int = 5000
    max_body_bytes: int = 2 * 1024 * 1024
    request_timeout_s: float = 30.0
    shutdown_timeout_s: float = 30.0
    # Connections, enforced before auth (app/protocol.py): a request line + headers over max_header_bytes
    # gets 431; headers not complete within header_timeout_s get 408; a body that stops arriving for
    # body_timeout_s, or an idle keep-alive connection after keep_alive_s, is closed.
    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    cors_origins: tuple[str, ...] = field(default_factory=tuple)
    # UI
    ui: bool = True
    data_dir: Path = Path("app-data")
    max_upload_mb: float = 20.0
    max_upload_rows: int = 50_000
    ui_concurrency: int = 2
    log_level: str = "info"

    def __post_init__(self):
        if self.api_key is not None and not self.api_key.strip():
            # `--api-key "$KEY"` with KEY unset would otherwise serve without auth, silently.
            raise ValueError("the API key is empty (an unset variable?): give a key, or leave --api-key and "
                             f"{API_KEY_ENV} out to serve without auth")


def parse_args(argv: list[str] | None = None) -> Config:
    d = Config(model="")
    p = argparse.ArgumentParser(prog="python -m app", description="Serve an ELECTRA classifier: JSON API and labeling UI.")
    p.add_argument("--model", required=True, help="ONNX export folder (serving.export) or transformers model folder")
    p.add_argument("--host", default=d.host)
    p.add_argument("--port", type=int, default=d.port)
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on the API and the UI (or set {API_KEY_ENV})")
    p.add_argument("--provider", default=d.provider, help="ONNX Runtime provider: auto, cpu, cuda")
    p.add_argument("--max-length", type=int, default=d.max_length, help="truncate texts to this many tokens")
    p.add_argument("--threads", type=int, default=d.threads, help="engine intra-op threads (default: engine's choice)")
    p.add_argument("--fp32", action="store_true", help="use model.onnx even where model_quantized.onnx exists")
    p.add_argument("--engine-batch-tokens", type=int, default=d.engine_batch_tokens,
                   help=f"padded tokens per forward pass (default: {CPU_PASS_TOKENS} on CPU, {GPU_PASS_TOKENS} on a GPU)")
    p.add_argument("--no-batching", dest="batching", action="store_false", help="one forward pass per request")
    p.add_argument("--max-batch-tokens", type=int, default=d.max_batch_tokens)
    p.add_argument("--max-wait-ms", type=float, default=d.max_wait_ms)
    p.add_argument("--workers", type=int, default=d.workers, help="batches run at once (engine threads)")
    p.add_argument("--max-queue", type=int, default=d.max_queue, help="texts waiting before requests get 429")
    p.add_argument("--max-texts", type=int, default=d.max_texts, help="texts per request")
    p.add_argument("--max-chars", type=int, default=d.max_chars, help="characters per text")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes)
    p.add_argument("--request-timeout", dest="request_timeout_s", type=float, default=d.request_timeout_s)
    p.add_argument("--shutdown-timeout", dest="shutdown_timeout_s", type=float, default=d.shutdown_timeout_s)
    p.add_argument("--max-header-bytes", type=int, default=d.max_header_bytes,
                   help="request line + headers; beyond it 431")
    p.add_argument("--header-timeout", dest="header_timeout_s", type=float, default=d.header_timeout_s,
                   help="seconds to receive a request's headers; then 408 and the connection is closed")
    p.add_argument("--body-timeout", dest="body_timeout_s", type=float, default=d.body_timeout_s,
                   help="seconds a request body may stall; then the connection is closed")
    p.add_argument("--keep-alive", dest="keep_alive_s", type=float, default=d.keep_alive_s,
                   help="seconds an idle keep-alive connection stays open")
    p.add_argument("--cors-origin", dest="cors_origins", action="append", default=[],
                   help="allow this browser origin (repeatable); CORS is off without it")
    p.add_argument("--no-ui", dest="ui", action="store_false", help="API only")
    p.add_argument("--data-dir", type=Path, default=d.data_dir, help="where the UI keeps labeling sessions")
    p.add_argument("--max-upload-mb", type=float, default=d.max_upload_mb)
    p.add_argument("--max-upload-rows", type=int, default=d.max_upload_rows)
    p.add_argument("--ui-concurrency", type=int, default=d.ui_concurrency,
                   help="UI scoring jobs (label upload, batch) running at once")
    p.add_argument("--log-level", default=d.log_level)
    a = p.parse_args(argv)
    if a.engine_batch_tokens is not None and a.engine_batch_tokens < 1:
        p.error("--engine-batch-tokens must be at least 1")
    for name in ("max_batch_tokens", "workers", "max_queue", "max_texts", "max_chars", "max_body_bytes",
                 "max_upload_rows", "ui_concurrency", "max_header_bytes"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for flag, value in (("--header-timeout", a.header_timeout_s), ("--body-timeout", a.body_timeout_s),
                        ("--keep-alive", a.keep_alive_s)):
        if not value > 0:
            p.error(f"{flag} must be positive")
    values = vars(a)
    key = a.api_key if a.api_key is not None else os.environ.get(API_KEY_ENV)
    if key is not None and not key.strip():
        where = "--api-key" if a.api_key is not None else f"the environment variable {API_KEY_ENV}"
        p.error(f"{where} is empty (an unset variable?): give a key, or leave it out to serve without auth")
    values["api_key"] = key
    values["cors_origins"] = tuple(a.cors_origins)
    return Config(**values)
