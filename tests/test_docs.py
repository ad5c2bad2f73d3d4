"""Docs cited from the code stay findable: a comment or docstring that sends a reader to a docs page and a quoted
section names a page that exists and words that page still holds (a heading, or the bold lead of a paragraph)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for pattern in ("*.py", "*.yaml", "*.yml", "*.sh", "Dockerfile")
           for p in ROOT.rglob(pattern) if not {".venv", ".git", "node_modules"} & set(p.parts)]


def flat(text: str) -> str:
    """One line per file: comment markers and line breaks as spaces, so a citation may wrap."""
    return re.sub(r"\s+", " ", re.sub(r"\n\s*#\s?", " ", text))


def citations() -> list[tuple[str, str, str]]:
    found = []
    for path in SOURCES:
        text = flat(path.read_text(encoding="utf-8", errors="replace"))
        for page, words in re.findall(r"docs/([a-z0-9_/-]+\.md),? \"([^\"]{3,80})\"", text):
            found.append((path.relative_to(ROOT).as_posix(), page, words))
    return found


CITATIONS = citations()


def test_the_code_cites_docs_sections():
    assert len(CITATIONS) >= 8  # the scan finds them (serving/quantize.py, engine.py, textdata/cpu_limits.py, ...)


@pytest.mark.parametrize(("source", "page", "words"), CITATIONS, ids=lambda v: str(v)[:40])
def test_cited_docs_section_exists(source, page, words):
    target = ROOT / "docs" / page
    assert target.exists(), f"{source} cites docs/{page}: no such page"
    assert words.lower() in flat(target.read_text(encoding="utf-8")).lower(), (
        f"{source} cites docs/{page}, \"{words}\": the page no longer holds those words")
