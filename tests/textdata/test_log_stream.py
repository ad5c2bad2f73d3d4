"""textdata/log_stream.py: a handler made while one stderr was current keeps working after it is closed."""

from __future__ import annotations

import io
import logging
import sys

from textdata.log_stream import StderrHandler


def test_records_go_to_the_stderr_of_the_moment_not_a_closed_one(monkeypatch):
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    handler = StderrHandler()
    log = logging.getLogger("tests.log_stream")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("one")
        first.close()  # a test's capture ends
        second = io.StringIO()
        monkeypatch.setattr(sys, "stderr", second)
        log.warning("two")
        assert second.getvalue() == "two\n"  # a plain StreamHandler raised "I/O operation on closed file" here
    finally:
        log.removeHandler(handler)
