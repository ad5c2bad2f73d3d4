"""Names, not server paths, in what read routes show (issue 24's rule, extended by issue 29).

`GET /v1/models` listed `imported_from` and `base_model` as server paths, job records and their logs the
staging folders, and a 404 the registry's path. What a client or the UI shows goes through `names_only`:
a value that is an absolute path becomes its last part, and in free text (errors, log lines) every
absolute path does (API routes such as /v1/jobs/ID are left as they are).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_PATH_IN_TEXT = re.compile(r"(?<![\w:/.~-])/(?!v1/)((?:[^\s/'\"(),;:]+/)+)([^\s/'\"(),;:]*)")


def names_only_text(text: str) -> str:
    return _PATH_IN_TEXT.sub(lambda m: m.group(2) or m.group(1).rstrip("/").rpartition("/")[2], text)


def names_only(obj):
    """`obj` (JSON-like) with every absolute path shown as its name."""
    if isinstance(obj, dict):
        return {k: names_only(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [names_only(v) for v in obj]
    if isinstance(obj, str):
        return Path(obj).name if os.path.isabs(obj) else names_only_text(obj)
    return obj
