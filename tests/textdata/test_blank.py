"""Texts of only NUL or zero-width characters are empty (issue 29): they got a 0.999-confident answer."""

from __future__ import annotations

import sys
import unicodedata

import pandas as pd

from textdata.blank import is_blank
from textdata.tables import missing_text


def test_every_control_format_and_space_character_is_blank_and_letters_are_not():
    invisible = [c for c in map(chr, range(sys.maxunicode + 1))
                 if unicodedata.category(c) in ("Cc", "Cf", "Zs", "Zl", "Zp")]
    assert len(invisible) > 200 and all(is_blank(c * 3) for c in invisible)
    assert is_blank("") and is_blank("\x00 \u200b\ufeff\u3164")
    for text in ("a", "꿈", "\u200b꿈\u200b", "0", "😀", "\x00a"):
        assert not is_blank(text), text


def test_missing_text_in_tables_agrees():
    cells = pd.Series(["memo", "\x00\x00", "\u200b\u200c", None, " \t", "a\u200b"], dtype=object)
    assert missing_text(cells).tolist() == [False, True, True, True, True, False]
