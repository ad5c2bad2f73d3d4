"""A lean HTTP/1.1 keep-alive client for load benches: one connection per client, requests written as
bytes and answers read by Content-Length.

httpx spent 5.9 ms of CPU a label save (a `next` and a `labels` request) in bench/team_labels.py, measured
on these 2 cores: at 500 saves/s the client alone would need 3 cores and the server would be measured
against its own load generator. This one spends a small fraction of that. It speaks only what the app
answers: a status line, headers, a Content-Length body (or none, for 204).
"""

from __future__ import annotations

import asyncio
import json


class RawClient:
    def __init__(self, host: str, port: int, headers: dict[str, str] | None = None, timeout: float = 30.0):
        self.host, self.port, self.timeout = host, port, timeout
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.reader = self.writer = None

    async def _connect(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, path: str, body=None) -> tuple[int, object]:
        """(status, parsed JSON body or None). ConnectionError/OSError/TimeoutError when the server is gone
        (the connection is dropped: the next call connects again)."""
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n{self.extra}\r\n").encode()
        try:
            if self.writer is None:
                await self._connect()
            self.writer.write(head + data)
            return await asyncio.wait_for(self._answer(), self.timeout)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
            self.close()
            raise ConnectionError(str(e) or type(e).__name__) from None

    async def _answer(self) -> tuple[int, object]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length, close = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        payload = await self.reader.readexactly(length) if length else b""
        if close:
            self.close()
        return status, (json.loads(payload) if payload else None)
