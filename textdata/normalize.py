"""Text normalisation that training and serving apply identically.

`--normalize` in finetune stores `normalization.json` beside the model; the serving engine reads it
back, so a model never sees text prepared differently from how it was trained. The `kc` recipe
follows KcELECTRA's preprocessing for noisy comments (emoji removed, URLs removed, a character
repeated more than twice cut to two, whitespace collapsed), written with `re` only: the original
needs `emoji` and `soynlp`, two dependencies for four regular expressions.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path

from textdata.model_files import NORMALIZATION as FILENAME

_URL = re.compile(r"https?://\S+|www\.\S+")
# Emoji and pictographs, dingbats, variation selectors, ZWJ, skin tones, flags.
_EMOJI = re.compile(
    "[\U0001f000-\U0001faff\U00002600-\U000027bf\U0000fe00-\U0000fe0f\U0000200d\U0001f1e6-\U0001f1ff\U00002b00-\U00002bff]+"
)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Normalizer:
    """`kind`: "none" (only NFC + whitespace trim) or "kc" (KcELECTRA-style cleaning)."""

    kind: str = "none"
    max_repeats: int = 2

    def __post_init__(self):
        if self.kind not in ("none", "kc"):
            raise ValueError(f"unknown normalisation {self.kind!r}; use 'none' or 'kc'")

    def __call__(self, text: str) -> str:
        # NFC always: a Korean string typed on macOS arrives decomposed (NFD) and would tokenize as jamo.
        text = unicodedata.normalize("NFC", text)
        if self.kind == "kc":
            text = _URL.sub(" ", text)
            text = _EMOJI.sub(" ", text)
            n = self.max_repeats
            text = re.sub(rf"(.)\1{{{n},}}", lambda m: m.group(1) * n, text)
            # Two-syllable repeats too (ㅋㅋ, 하하하하 -> 하하), as soynlp's repeat_normalize does.
            text = re.sub(rf"(..)\1{{{n},}}", lambda m: m.group(1) * n, text)
        return _SPACE.sub(" ", text).strip()

    def save(self, folder: str | Path) -> None:
        Path(folder, FILENAME).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> Normalizer:
        """The folder's normalisation, or the plain one for models trained elsewhere."""
        path = Path(folder, FILENAME)
        if not path.exists():
            return cls()
        data = json.loads(path.read_text(encoding="utf-8"))
        unknown = set(data) - {"kind", "max_repeats"}
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
        return cls(**data)
