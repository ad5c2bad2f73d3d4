"""app/http/redact.py: what clients read names things, never a server path or a store's URL."""

from __future__ import annotations

import pytest

from app.http.redact import names_only, names_only_text

CASES = {
    "file:///srv/store/v2-bc09fdd7d41e: its files' sha256 is 6c7e": "v2-bc09fdd7d41e: its files' sha256 is 6c7e",
    "s3://AKIAKEY:s3cret@bucket/prefix/v3-abc/config.json: cannot fetch it": "config.json: cannot fetch it",
    "gs://bucket: not reachable.": "bucket: not reachable.",
    "no version v9 in /srv/models (versions: v1)": "no version v9 in models (versions: v1)",
    "see /v1/jobs/abc for the log": "see /v1/jobs/abc for the log",
}


@pytest.mark.parametrize("text,shown", CASES.items())
def test_urls_and_paths_in_free_text_become_names(text, shown):
    assert names_only_text(text) == shown


def test_values_in_json_too():
    assert names_only({"store": "s3://k:secret@bucket/models", "n": 1}) == {"store": "models", "n": 1}
