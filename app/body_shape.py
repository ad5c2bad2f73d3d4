"""How many values a JSON body holds, counted on its bytes before anything parses it.

A body under --max-body-bytes that fails validation in many places cost the server in proportion to its
values, all on the event loop: `{"texts": [null]*340000}` (2 MB) took 16 s to parse, validate and answer
with 46.7 MB of errors, 150,000 unknown keys 5-8 s, and every other client waited. Parsing alone is up to
0.25 s for 2 MB of keys, floats or nested lists (json and orjson alike hold the GIL throughout). Every body
the API and the UI take holds a few fields and at most --max-texts texts, so a body with more values than
that is refused before it is parsed: counted here in C-speed passes over 64 KB slices, in a thread, so the
event loop keeps its turns between slices.

What is counted: the commas and opening brackets/braces outside strings, one per list item or object
member past the first, which bounds how many values a parser would build. Escapes are dropped first
(`\\\\`, then `\\"`), so every quote left opens or closes a string.
"""

from __future__ import annotations

SCAN_FROM_BYTES = 16 * 1024  # a smaller body holds too few values to cost anything (~1 ms parsed at worst)
SLICE_BYTES = 64 * 1024
SEPARATORS = (b",", b"[", b"{")


def _count(data: bytes) -> int:
    return sum(data.count(s) for s in SEPARATORS)


def json_values(body: bytes, limit: int) -> int:
    """The separators outside strings in `body` (a JSON text), counted up to `limit + 1`: more than `limit`
    means the body holds more than about `limit` values."""
    anywhere = _count(body)  # inside strings too: an upper bound, enough for most bodies
    if anywhere <= limit:
        return anywhere
    cleaned = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    found, inside = 0, False
    for start in range(0, len(cleaned), SLICE_BYTES):
        parts = cleaned[start:start + SLICE_BYTES].split(b'"')
        found += _count(b"".join(parts[1 if inside else 0::2]))  # the parts outside strings
        if len(parts) % 2 == 0:  # an odd number of quotes in this slice: the next one starts on the other side
            inside = not inside
        if found > limit:
            break
    return found


def too_many_values(limit: int, what: str) -> dict:
    """The 422 body for a body over `limit` values, in the API's validation shape."""
    msg = f"over {limit} JSON values (list items, object fields); {what}"
    return {"detail": [{"type": "too_long", "loc": ["body"], "msg": msg}], "message": f"body: {msg}", "error_count": 1}
