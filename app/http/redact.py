"""Names, not server paths, in what read routes show (issue 24's rule, extended by issue 29).

`GET /v1/models` listed `imported_from` and `base_model` as server paths, job records and their logs the
staging folders, and a 404 the registry's path. What a client or the UI shows goes through `names_only`:
a value that is an absolute path becomes its last part, and in free text (errors, log lines) every
absolute path does (API routes such as /v1/jobs/ID are left as they are). A URL (a fleet's `--model-store`
`file:///srv/store`, `s3://bucket/prefix`, with or without credentials) is a server path too: it becomes the
last part of its path (`v2-bc09fdd7d41e`), or its host where it has no path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

_PATH_IN_TEXT = re.compile(r"(?<![\w:/.~-])/(?!v1/)((?:[^\s/'\"(),;:]+/)+)([^\s/'\"(),;:]*)")


# scheme://anything up to a space, quote or bracket, not ending in the ':' or '.' of the sentence around it
_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"()<>,;]*[^\s'\"()<>,;:.]")


def _url_name(m: re.Match) -> str:
    try:
        parts = urlsplit(m.group(0))
        return parts.path.rstrip("/").rpartition("/")[2] or parts.hostname or parts.scheme
    except ValueError:  # a malformed one: nothing of it
        return "(a URL)"


def names_only_text(text: str) -> str:
    if "://" in text:
        text = _URL_IN_TEXT.sub(_url_name, text)
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
