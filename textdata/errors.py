"""One hierarchy for problems the user can fix: every CLI's `main()` prints them as one line and exits 2.

Anything else is a bug and keeps its traceback. Each class is also a `ValueError`, which is what callers
caught before there was one hierarchy.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable


class UserError(ValueError):
    """A problem with what the user gave us (file, flag, model folder) that they can fix."""


class DataError(UserError):
    """A bad input file or value: the message names the file, line, column and value."""


class ModelError(UserError):
    """The model folder cannot be used (missing, unreadable, incomplete, fails a gate)."""


class UsageError(UserError):
    """Flags or settings that cannot work together (e.g. fp16 on a CPU)."""


def exits_2_on_user_error(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap a CLI `main`: a `UserError` becomes `error: <message>` on stderr and exit status 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    return wrapper


def capped(items, limit: int = 10) -> str:
    """Items for an error message, at most `limit` of them: "a, b, c and 9,997 more". A refusal naming every
    one of 10,000 classes was half a megabyte (issue 40)."""
    items = list(items)
    shown = ", ".join(str(x) if len(str(x)) <= 80 else str(x)[:79] + "…" for x in items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit:,} more"
