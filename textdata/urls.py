"""URLs as they may be shown: in a log line, a warning, a summary file. An endpoint given with its credentials
in the URL (`http://user:pass@host/v1`, `...?api-key=...`, as some gateways want them) must work, and must
never be written out: the HTTP client logs every request's full URL, and a start warning names the endpoint.
"""

from __future__ import annotations

import re

HIDDEN = "***"
# query keys that carry a secret on the gateways in use (Azure's api-key, Google's key, signed URLs' sig...)
_SECRET_KEY = re.compile(r"(?i)^(.*[-_])?(key|apikey|token|secret|password|passwd|pass|pwd|sig|signature|auth"
                         r"|authorization|credentials?|code)$")
# the user info, up to the host's last @ (a password may hold an @ of its own); a user name alone may be the
# token (https://TOKEN@host), so all of it goes
# (neither spans a quote or a backslash: a JSON log line's escapes stay whole)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s?#\"'\\]*@")
_QUERY_PAIR = re.compile(r"([?&;])([^=&;#\s\"'\\]+)=([^&;#\s\"'\\]+)")


def _pair(m: re.Match) -> str:
    return f"{m.group(1)}{m.group(2)}={HIDDEN}" if _SECRET_KEY.match(m.group(2)) else m.group(0)


def redact(text: str) -> str:
    """`text` with every URL's user info and secret query values replaced by ***; any text, one URL or a log
    line holding some (cheap where there is none)."""
    if "://" not in text:
        return text
    return _QUERY_PAIR.sub(_pair, _USERINFO.sub(lambda m: f"{m.group(1)}{HIDDEN}@", text))
