"""A log handler that writes to whatever `sys.stderr` is when a record comes, not the stream it was made with.

`logging.StreamHandler(sys.stderr)` keeps the stream of the moment it was made: after that stream is replaced
and closed (a test's capture, a redirected stderr), every record became "--- Logging error --- I/O operation
on closed file" with a traceback, which is what the suite printed among its dots and what a k-fold run under
a test then showed in its own stderr. The standard library's lastResort handler does the same; it is private.
"""

from __future__ import annotations

import logging
import sys


class StderrHandler(logging.StreamHandler):
    def __init__(self, level: int = logging.NOTSET):
        logging.Handler.__init__(self, level)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.setStream: the stream is always the current stderr
        pass
