"""Gradio's upload route bounded per request and per address (issue 29, app/http/upload_guard.py): one request
with ten 19 MB files stored 190 MB, and nothing bounded how often."""

from __future__ import annotations

import asyncio

from app.http.upload_guard import UploadGuard, is_upload

MB = 1 << 20


def _run(guard, body_chunks, headers=(), client="10.0.0.1"):
    """The guard in front of an app that reads the whole body and answers 200 with the size it read."""
    seen = {"read": 0, "disconnected": False}

    async def app(scope, receive, send):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                seen["disconnected"] = True
                await send({"type": "http.response.start", "status": 400, "headers": []})
                await send({"type": "http.response.body", "body": b"cut"})
                return
            seen["read"] += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(seen["read"]).encode()})

    chunks = list(body_chunks)
    sent = []

    async def receive():
        if chunks:
            body = chunks.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(chunks)}
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/ui/gradio_api/upload", "headers": list(headers)}
    asyncio.run(guard(app, scope, receive, send, client))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], seen


def test_a_request_over_the_total_is_refused_declared_or_streamed():
    guard = UploadGuard(max_request_bytes=3 * MB, bytes_per_minute=100 * MB)
    status, seen = _run(guard, [b"x" * MB] * 10, headers=[(b"content-length", str(10 * MB).encode())])
    assert status == 413 and seen["read"] == 0  # refused from its Content-Length, unread
    status, seen = _run(guard, [b"x" * MB] * 10)  # chunked: no Content-Length
    assert status == 413 and seen["disconnected"] and seen["read"] <= 3 * MB
    status, seen = _run(guard, [b"x" * MB] * 2)
    assert status == 200 and seen["read"] == 2 * MB


def test_an_address_is_bounded_per_minute_and_others_are_not():
    guard = UploadGuard(max_request_bytes=3 * MB, bytes_per_minute=5 * MB)
    codes = [_run(guard, [b"x" * MB] * 2, headers=[(b"content-length", str(2 * MB).encode())])[0] for _ in range(4)]
    assert codes == [200, 200, 429, 429]
    assert _run(guard, [b"x" * MB], client="10.0.0.2")[0] == 200
    assert guard.retry_after("10.0.0.1", 2 * MB) > 0 and guard.retry_after("10.0.0.1", MB) == 0


def test_only_the_upload_route_is_guarded():
    assert is_upload("/ui/gradio_api/upload") and is_upload("/ui/gradio_api/upload/")
    assert not is_upload("/ui/gradio_api/queue/join") and not is_upload("/v1/classify")
