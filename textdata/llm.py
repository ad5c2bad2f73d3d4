"""Asking an LLM for a label through any OpenAI-compatible endpoint: the prompt, the call, the answer read back.

Shared by `finetune.teach` (labelling a table: the teacher) and the app's cascade (app/llm/fallback.py: answers the
model is not sure of). The call goes through the `openai` client library (pip install -e '.[llm]'), imported
only when an LLM is asked: serving without a fallback never needs it. Retries with backoff on 429, 5xx,
timeouts and dropped connections are the client's own (`max_retries`; it honours Retry-After).

An answer is matched to the label set ignoring case, surrounding spaces, quotes and a final full stop; anything
else is kept as given and flagged, never mapped to the nearest label: a teacher that answers outside the label
set is a fact the user must see.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

from textdata.errors import UsageError
from textdata.labels import LabelSpace
from textdata.urls import redact

TEXT, LABELS = "{text}", "{labels}"
_STRIP = " \t\r\n\"'`.*"
_SPLIT = re.compile(r"[,;\n]+")


def check_prompt(template: str, source: str = "the prompt") -> str:
    """The template, or UsageError naming what it lacks: the text and the label list must both reach the LLM."""
    missing = [p for p in (TEXT, LABELS) if p not in template]
    if missing:
        raise UsageError(f"{source}: no {' or '.join(missing)} placeholder; the prompt must hold {TEXT} (where the "
                         f"text goes) and {LABELS} (where the label list goes)")
    return template


def read_prompt(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return check_prompt(f.read(), path)
    except OSError as e:
        raise UsageError(f"{path}: cannot read the prompt ({e.strerror})") from None


def render(template: str, text: str, labels: list[str]) -> str:
    """Plain replacement, not str.format: texts and prompts hold braces (JSON examples, code)."""
    return template.replace(LABELS, ", ".join(labels)).replace(TEXT, text)


def cache_key(model: str, prompt: str) -> str:
    """One key per (model, rendered prompt): the same text asked the same way is never paid for twice; a changed
    prompt, label list or model is a new question."""
    return hashlib.sha256(f"{model}\n{prompt}".encode()).hexdigest()


@dataclass(frozen=True)
class Parsed:
    labels: tuple[str, ...]  # the answer's labels that are in the label set, in label-set spelling
    outside: tuple[str, ...]  # parts of the answer that are not (kept as given)
    in_label_set: bool  # one known label (a set of known ones, or "none", with multi_label) and nothing else


def parse_answer(answer: str, labels: list[str], multi_label: bool = False) -> Parsed:
    """The answer read for one label (`multi_label` False: the whole answer is its label) or a set of them (parts
    split at commas, semicolons or lines; "none" is the empty set)."""
    return LabelSpace.of(labels, multi_label).pick(_one_label, _label_set)(answer, labels)


def _label_set(answer: str, labels: list[str]) -> Parsed:
    parts = [p for p in (p.strip(_STRIP) for p in _SPLIT.split(answer)) if p]
    if [p.lower() for p in parts] == ["none"]:
        return Parsed((), (), True)  # an empty set, said in words
    return _known(parts, labels)


def _one_label(answer: str, labels: list[str]) -> Parsed:
    return _known([p for p in [answer.strip(_STRIP)] if p], labels)


def _known(parts: list[str], labels: list[str]) -> Parsed:
    by_key = {label.strip().lower(): label for label in labels}
    known = tuple(dict.fromkeys(by_key[p.lower()] for p in parts if p.lower() in by_key))
    outside = tuple(p for p in parts if p.lower() not in by_key)
    return Parsed(known, outside, bool(known) and not outside)


@dataclass(frozen=True)
class Answer:
    text: str  # what the LLM said ("" on error)
    input_tokens: int = 0
    output_tokens: int = 0
    error: str = ""  # why there is no answer after the retries


def make_client(base_url: str, timeout: float, retries: int, api_key_env: str = "OPENAI_API_KEY"):
    """An AsyncOpenAI client; a local server needs no key, so a missing one is a placeholder, not an error."""
    try:
        from openai import AsyncOpenAI
    except ModuleNotFoundError:
        raise UsageError("asking an LLM needs the openai package: pip install -e '.[llm]'") from None
    return AsyncOpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "unused", timeout=timeout,
                       max_retries=retries)


def describe(e: Exception) -> str:
    """One line for the error column: the status where there is one; a URL in it without its credentials."""
    status = getattr(e, "status_code", None)
    kind = type(e).__name__
    said = redact(str(e))[:200]
    return f"{kind} {status}: {said}" if status else f"{kind}: {said}"


MAX_ANSWER_CHARS = 4000  # a label (or a set of them) is short; a longer answer is cut, never kept whole
MAX_TOKENS_PER_CALL = 10_000_000  # a count past this is the endpoint's nonsense, not a bill: ignored


def _tokens(count) -> int:
    """A reported token count as a non-negative integer; anything else (a string, a float, 1e308, a negative) is
    ignored: the counts are summed into /v1/monitor's cost, which must stay finite."""
    if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= MAX_TOKENS_PER_CALL:
        return count
    return 0


async def ask(client, model: str, prompt: str, max_tokens: int = 20, temperature: float = 0.0) -> Answer:
    """One chat completion; an error left after the client's retries is returned in the Answer, never raised.

    A 200 answer the client cannot read (not JSON, `[]`, `choices` not a list, a message of null, content that is
    not a string) is that call's error too: the client parses lazily, so its own exceptions (JSONDecodeError,
    AttributeError, TypeError...) come out of reading the reply as well as out of the call."""
    import openai

    try:
        reply = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                                     max_tokens=max_tokens, temperature=temperature)
        content = reply.choices[0].message.content if reply.choices else ""
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise TypeError(f"the answer's content is {type(content).__name__}, not a string")
        usage = getattr(reply, "usage", None)
        tokens = _tokens(getattr(usage, "prompt_tokens", 0)), _tokens(getattr(usage, "completion_tokens", 0))
    except openai.OpenAIError as e:
        return Answer("", error=describe(e))
    except Exception as e:  # noqa: BLE001 - any reply the client cannot read is this call's error, not the caller's
        return Answer("", error=f"malformed answer: {describe(e)}")
    return Answer(content[:MAX_ANSWER_CHARS], *tokens)
