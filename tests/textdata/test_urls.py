"""textdata/urls.py: a URL's credentials are hidden wherever it is written, the rest of the text kept."""

from __future__ import annotations

import json

import pytest

from textdata.urls import redact

CASES = {
    "http://llmuser:llmpass@127.0.0.1:18590/v1": "http://***@127.0.0.1:18590/v1",
    "https://TOKEN@host/v1": "https://***@host/v1",  # a user name alone may be the token
    "POST http://u:p@ss@h:1/v1/chat/completions \"HTTP/1.1 200 OK\"": "POST http://***@h:1/v1/chat/completions \"HTTP/1.1 200 OK\"",
    "https://x.azure.com/v1?api-version=2024-06&api-key=abc123": "https://x.azure.com/v1?api-version=2024-06&api-key=***",
    "https://h/v1?key=zz&x=1&access_token=t": "https://h/v1?key=***&x=1&access_token=***",
    "no url: a@b ?key=v": "no url: a@b ?key=v",
    "http://host/ mail me at foo@bar": "http://host/ mail me at foo@bar",
}


@pytest.mark.parametrize("text,shown", CASES.items())
def test_userinfo_and_secret_query_values_are_hidden(text, shown):
    assert redact(text) == shown


def test_a_json_log_line_stays_json():
    line = json.dumps({"msg": 'call http://u:pw@h/v1?token=a"b\\c', "n": 1})
    out = json.loads(redact(line))
    assert out["msg"].startswith("call http://***@h/v1?token=***") and "pw" not in out["msg"] and out["n"] == 1
