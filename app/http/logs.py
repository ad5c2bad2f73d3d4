"""One JSON object per line on stderr, so request logs can be shipped and queried without parsing prose."""

from __future__ import annotations

import json
import logging
import time

from textdata.log_stream import StderrHandler
from textdata.urls import redact


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        out.update(getattr(record, "fields", {}))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        # a URL's credentials (--fallback-url http://user:pass@..., ?api-key=...) never reach the log, whichever
        # logger names it (the HTTP client logs each request's URL, a warning the endpoint, an error its text)
        return redact(json.dumps(out, ensure_ascii=False, default=str))


def setup(level: str = "info") -> None:
    handler = StderrHandler()  # the stderr of the moment each record comes (textdata/log_stream.py)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's own loggers would print prose beside our JSON; route them through the same handler.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
    # httpx logs every request Gradio makes to itself at INFO, httpx2 (the openai client's) every LLM call;
    # alembic names each plugin it loads on import.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
