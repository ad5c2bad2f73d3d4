"""Bounds on Gradio's upload route that Gradio does not keep: a request's total size and a rate per address.

Gradio checks --max-upload-mb per file, so one `POST /ui/gradio_api/upload` holding ten 19 MB files stored
190 MB, and nothing bounded how often. Here, before Gradio reads it: a request whose body (all its files,
counted as it arrives, with or without Content-Length) passes --max-upload-mb (plus the multipart framing)
gets 413; an address that sent more than --upload-mb-per-minute in the last minute gets 429.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict, deque

FRAMING_BYTES = 64 * 1024  # multipart boundaries and part headers around the files
WINDOW_S = 60.0


def is_upload(path: str) -> bool:
    return path.startswith("/ui/") and path.rstrip("/").endswith("/gradio_api/upload")


class UploadGuard:
    def __init__(self, max_request_bytes: int, bytes_per_minute: int, clients: int = 10_000):
        self.max_request_bytes, self.bytes_per_minute, self.clients = max_request_bytes, bytes_per_minute, clients
        self._sent: OrderedDict[str, deque] = OrderedDict()  # address -> (time, bytes) in the window

    def _window(self, client: str) -> deque:
        now = time.monotonic()
        sent = self._sent.setdefault(client, deque())
        self._sent.move_to_end(client)
        while sent and now - sent[0][0] > WINDOW_S:
            sent.popleft()
        while len(self._sent) > self.clients:
            self._sent.popitem(last=False)
        return sent

    def retry_after(self, client: str, size: int) -> int:
        """Seconds until `client` may upload `size` more bytes; 0 when it may now."""
        sent = self._window(client)
        if sum(n for _, n in sent) + size <= self.bytes_per_minute or not sent:
            return 0
        return int(WINDOW_S - (time.monotonic() - sent[0][0])) + 1

    def count(self, client: str, size: int) -> None:
        self._window(client).append((time.monotonic(), size))

    async def __call__(self, app, scope, receive, send, client: str) -> None:
        length = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), b"")
        declared = int(length) if length.isdigit() else 0
        if declared > self.max_request_bytes:
            await _refuse(send, 413, f"an upload request may hold {self.max_request_bytes >> 20} MB in all "
                                     "(--max-upload-mb); send fewer or smaller files")
            return
        wait = self.retry_after(client, declared)
        if wait:
            await _refuse(send, 429, "too much uploaded from this address in the last minute "
                                     "(--upload-mb-per-minute); retry later", [(b"retry-after", str(wait).encode())])
            return
        state = {"bytes": 0, "over": False, "started": False}

        async def counted():
            message = await receive()
            if message["type"] == "http.request":
                state["bytes"] += len(message.get("body", b""))
                if state["bytes"] > self.max_request_bytes:
                    state["over"] = True
                    return {"type": "http.disconnect"}  # Gradio stops reading; the answer is ours
            return message

        async def guarded_send(message):
            if state["over"]:
                return  # whatever Gradio answers to the cut body, the client gets the 413 below
            state["started"] = state["started"] or message["type"] == "http.response.start"
            await send(message)

        try:
            await app(scope, counted, guarded_send)
        except Exception:
            if not state["over"]:
                raise
        finally:
            self.count(client, state["bytes"])
        if state["over"] and not state["started"]:
            await _refuse(send, 413, f"an upload request may hold {self.max_request_bytes >> 20} MB in all "
                                     "(--max-upload-mb)")


async def _refuse(send, status: int, detail: str, headers=()) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})
