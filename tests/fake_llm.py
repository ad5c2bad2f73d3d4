"""A local OpenAI-compatible chat-completions server for tests: the real `openai` client talks to it, no network.

Deterministic answers: the first label named in the text (the texts say what they are about), else the first of
the label list; "SAY:xyz" in the text makes it answer xyz (an answer outside the label set). Failures on demand:
a text holding FAIL500 always gets a 500, one holding SLOW sleeps past any short client timeout (`delay`: every
answer waits that long), and
`fail_first(n, status)` makes the next n calls fail with that status (429 with a tiny Retry-After, so the
client's backoff is short), and `body` (a string) is sent verbatim as every 200 answer's JSON body (a malformed
endpoint). Every request is counted, failed ones too.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from contextlib import contextmanager

import pytest
from fastapi import FastAPI, Request  # at module level: the handler's annotations are resolved here
from fastapi.responses import JSONResponse, Response

LABELS_IN_PROMPT = re.compile(r"Labels: (.*)\n")
TEXT_IN_PROMPT = re.compile(r"Text: (.*)", re.DOTALL)


class FakeLLM:
    def __init__(self):
        self.calls = 0
        self.failures_left = 0
        self.failure_status = 429
        self.delay = 0.0  # seconds every answer takes
        self.body: str | None = None  # sent as the 200 answer's body instead of a completion
        self.lock = threading.Lock()
        self.url = ""

    def fail_first(self, n: int, status: int = 429) -> None:
        self.failures_left, self.failure_status = n, status

    def answer(self, prompt: str) -> str:
        labels = [x.strip() for x in LABELS_IN_PROMPT.search(prompt).group(1).split(",")]
        text = TEXT_IN_PROMPT.search(prompt).group(1)
        said = re.search(r"SAY:(\S+)", text)
        if said:
            return said.group(1)
        return next((x for x in labels if x in text.lower()), labels[0])

    def app(self):
        api = FastAPI()

        @api.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            prompt = body["messages"][-1]["content"]
            with self.lock:
                self.calls += 1
                failing = self.failures_left > 0
                self.failures_left -= failing
            if failing:
                return JSONResponse({"error": {"message": "injected"}}, status_code=self.failure_status,
                                    headers={"retry-after-ms": "5"})
            if "FAIL500" in prompt:
                return JSONResponse({"error": {"message": "injected 500"}}, status_code=500,
                                    headers={"retry-after-ms": "5"})
            if "SLOW" in prompt:
                await asyncio.sleep(5)
            await asyncio.sleep(self.delay)
            if self.body is not None:
                return Response(self.body, media_type="application/json")
            content = self.answer(prompt)
            return {"id": "fake", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 1,
                              "total_tokens": len(prompt.split()) + 1}}

        return api


PROMPT = "Classify the text into one of these labels.\nLabels: {labels}\nAnswer with the label only.\nText: {text}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_llm():
    """A FakeLLM served by uvicorn on 127.0.0.1 in a thread; `.url` is its base URL (…/v1)."""
    import uvicorn

    fake = FakeLLM()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(fake.app(), host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("the fake LLM server did not start")
        time.sleep(0.02)
    fake.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield fake
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def llm():
    """A fake LLM for the module's tests (tests/conftest.py shares it)."""
    with running_llm() as fake:
        yield fake


@pytest.fixture
def fake(llm):
    """The module's fake LLM, its counts and failures reset for this test."""
    llm.calls, llm.failures_left, llm.delay, llm.body = 0, 0, 0.0, None
    return llm
