"""How many values a JSON body holds, counted on its bytes before anything parses it.

A body under --max-body-bytes that fails validation in many places cost the server in proportion to its
values, all on the event loop: `{"texts": [null]*340000}` (2 MB) took 16 s to parse, validate and answer
with 46.7 MB of errors, 150,000 unknown keys 5-8 s, and every other client waited. Parsing alone is up to
0.25 s for 2 MB of keys, floats or nested lists (json and orjson alike hold the GIL throughout). Every body
the API and the UI take holds a few fields and at most --max-texts texts, so a body with more values than
that is refused before it is parsed: counted here as its bytes arrive, in C-speed passes over at most 64 KB
at a time, and refused at the chunk that passes the limit, the rest never read.

What is counted: the commas and opening brackets/braces outside strings, one per list item or object
member past the first, which bounds how many values a parser would build. Escapes are dropped first
(escaped backslashes, then escaped quotes), so every quote left opens or closes a string.
"""

from __future__ import annotations

SCAN_FROM_BYTES = 16 * 1024  # a smaller body holds too few values to cost anything (~1 ms parsed at worst)
SLICE_BYTES = 64 * 1024  # work per step: well under a millisecond, so the event loop keeps its turns
SEPARATORS = (b",", b"[", b"{")


class ValueCounter:
    """Counts a JSON body's values as its bytes arrive (`feed` each chunk): a body over the limit is refused
    at the chunk that passes it, without the rest being read."""

    def __init__(self, limit: int):
        self.limit, self.found, self.inside, self.carry = limit, 0, False, b""

    def feed(self, data: bytes) -> bool:
        """Count `data`, the body's next bytes; True once more than `limit` values were seen."""
        for start in range(0, len(data), SLICE_BYTES):
            if self._step(data[start:start + SLICE_BYTES]):
                return True
        return False

    def _step(self, data: bytes) -> bool:
        data, self.carry = self.carry + data, b""
        run = len(data) - len(data.rstrip(b"\\"))
        if run % 2:  # an escape split between two chunks: its backslash waits for the escaped byte
            data, self.carry = data[:-1], b"\\"
        parts = data.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')
        outside = b"".join(parts[1 if self.inside else 0::2])
        self.found += sum(outside.count(s) for s in SEPARATORS)
        if len(parts) % 2 == 0:  # an odd number of quotes: the next bytes start on the other side
            self.inside = not self.inside
        return self.found > self.limit


def json_values(body: bytes, limit: int) -> int:
    """The separators outside strings in `body`, counted up to the slice that passes `limit`."""
    counter = ValueCounter(limit)
    counter.feed(body)
    return counter.found


def too_many_values(limit: int, what: str) -> dict:
    """The 422 body for a body over `limit` values, in the API's validation shape."""
    msg = f"over {limit} JSON values (list items, object fields); {what}"
    return {"detail": [{"type": "too_long", "loc": ["body"], "msg": msg}], "message": f"body: {msg}", "error_count": 1}
