"""Which sites may talk to the server: the names it answers to, and no state change from another origin.

Without this, any web page open on the machine could retrain or roll back a loopback server with no key (a
form or `fetch(..., {mode: "no-cors"})` POST is sent, only its answer is hidden), and DNS rebinding
(evil.example resolving to 127.0.0.1) let such a page read answers too. So, before auth and routes:
- `Host` must be a name the server answers to: the loopback names, the `--host` it listens on, and each
  `--allowed-host`; listening on a wildcard address (0.0.0.0, ::) without `--allowed-host`, any name
  (the server cannot know its public names), which the start log points out. Probes (/healthz, /readyz)
  answer under any name: an orchestrator calls them by pod IP.
- A request that can change something (any method but GET/HEAD/OPTIONS, and WebSockets) from a browser
  must come from the server's own origin or a `--cors-origin`: `Origin` is compared with `Host`, and
  without `Origin`, `Sec-Fetch-Site` must not say cross-site or same-site. Clients that are not browsers
  send neither header and are not affected.
- Each `--cors-origin` is one origin, `http(s)://name[:port]`: `*` would let every web page read what a
  GET answers (on a loopback server, the registry and jobs with their labeled texts) and `null` any
  sandboxed frame or local file write, so both are refused at start, and so is a value with a path, which
  would never match (issue 40).
- API writes (POST under /v1/) take JSON only: a body sent as text/plain, a form or multipart, which a
  page can send cross-site without asking first, is refused (415).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ANY_HOST_PATHS = frozenset({"/healthz", "/readyz"})
JSON_TYPES = ("application/json",)


def _header(scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return v.decode("latin-1")
    return None


def split_host(value: str) -> tuple[str, int | None]:
    """('name', port or None) of a Host header value or an origin's netloc, IPv6 brackets removed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    return name.rstrip("."), int(port) if port.isdigit() else None


def _is_loopback(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return name == "localhost"


def cors_origin_problem(origin: str) -> str | None:
    """Why `origin` cannot be a --cors-origin, or None."""
    value = origin.strip()
    if value == "*":
        return ("'*' would let every web page read what this server answers (on a loopback server the registry "
                "and jobs, with labeled texts); name each origin, e.g. --cors-origin https://app.example")
    if value.lower() == "null":
        return "'null' is the origin of every sandboxed frame and local file, not of one site; name the site's origin"
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return f"{value[:100]!r} is not an origin: write scheme://name[:port], e.g. https://app.example"
    if parts.path.strip("/") or parts.query or parts.fragment:
        return f"{value[:100]!r} has a path; an origin is scheme://name[:port] only (browsers send no path)"
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number or out of range
    except ValueError:
        return f"{value[:100]!r} has a port that is not one"
    return None


class SiteRule:
    """The Host and Origin checks for one server's settings (app/config.py: host, allowed_hosts, cors_origins)."""

    def __init__(self, host: str, allowed_hosts=(), cors_origins=()):
        self.any_host = host in WILDCARDS and not allowed_hosts
        self.names = set(LOOPBACK_NAMES) | {split_host(h)[0] for h in allowed_hosts}
        if host not in WILDCARDS:
            self.names.add(split_host(host)[0])
        bad = next((why for why in map(cors_origin_problem, cors_origins) if why), None)
        if bad:  # parse_args says it first; a server built in code is held to the same rule
            raise ValueError(f"--cors-origin: {bad}")
        self.cors = {o.strip().rstrip("/").lower() for o in cors_origins}

    def host_allowed(self, host: str | None) -> bool:
        if self.any_host:
            return True
        name = split_host(host or "")[0]
        return name in self.names or _is_loopback(name)

    def refusal(self, scope) -> tuple[int, str] | None:
        """(status, why) for a request this rule refuses, else None."""
        path, websocket = scope.get("path", ""), scope["type"] == "websocket"
        host = _header(scope, b"host")
        if path not in ANY_HOST_PATHS and not self.host_allowed(host):
            return 421, (f"Host {host!r} is not a name this server answers to (a page on another site calling it "
                         "through DNS rebinding?); start the server with --allowed-host NAME for a name of its own")
        if not websocket and scope.get("method", "GET") in SAFE_METHODS:
            return None
        why = self._cross_origin(scope, host)
        if why:
            return 403, why
        if not websocket and path.startswith("/v1/") and scope.get("method") == "POST":
            kind = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if kind and kind not in JSON_TYPES and not kind.endswith("+json"):
                return 415, f"content type {kind!r}: this route takes JSON (Content-Type: application/json)"
        return None

    def _cross_origin(self, scope, host: str | None) -> str | None:
        origin = _header(scope, b"origin")
        if origin is None:
            site = (_header(scope, b"sec-fetch-site") or "").lower()
            if site in ("cross-site", "same-site"):
                return f"a {site} request from a browser may not change anything here"
            return None
        if origin.strip().rstrip("/").lower() in self.cors or self._same_origin(origin, host):
            return None
        return (f"a request from the page at {origin[:100]!r} may not change anything here (only this server's own "
                "pages, or a --cors-origin)")

    @staticmethod
    def _same_origin(origin: str, host: str | None) -> bool:
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc or host is None:
            return False  # "null" (a sandboxed frame, a file://) is never the server's own page
        default = 443 if parts.scheme == "https" else 80
        o_name, o_port = split_host(parts.netloc)
        h_name, h_port = split_host(host)
        return o_name == h_name and (o_port or default) == (h_port or default)
