"""A text with nothing to read: empty, whitespace, or only invisible characters.

A text of NUL bytes or zero-width spaces got a 0.999-confident answer: `str.strip` keeps them, and the
tokenizer turns them into nothing (or [UNK]), so the model answered its bias. Such a text is empty like ""
everywhere a text is checked: the API (422), batch scoring and the UI (`empty text` in `error`), training
tables (left out). Invisible: whitespace, control characters (Cc), format characters (Cf: zero-width
space and joiners, direction marks, the byte-order mark, tags), variation selectors, the combining
grapheme joiner and the Hangul fillers (letters by category, blank on screen).
"""

from __future__ import annotations

import re

INVISIBLE = (
    "\\s\x00-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f\U000e0100-\U000e01ef"
)
BLANK = re.compile(f"[{INVISIBLE}]*")


def is_blank(text: str) -> bool:
    return BLANK.fullmatch(text) is not None
