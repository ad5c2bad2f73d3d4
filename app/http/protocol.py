"""uvicorn's httptools protocol with the bounds it lacks, enforced before any route or auth runs.

uvicorn keeps no limit on header size and no read timeouts: a 50 MB header was accepted, four unfinished
100 MB headers held 670 MB, and a client sending one byte at a time held its connection for ever.
Here, per connection:
- request line + headers over `max_header_bytes` -> 431 and close (counted as they arrive, so the
  parser never buffers more than one read beyond the limit);
- headers not complete `header_timeout_s` after their first byte (or after the connection opens) ->
  408 and close;
- a request body with no new byte for `body_timeout_s` -> close;
- idle keep-alive connections: uvicorn's own `timeout_keep_alive`.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


def bounded_protocol(max_header_bytes: int, header_timeout_s: float, body_timeout_s: float) -> type:
    """An HttpToolsProtocol class with these bounds (uvicorn.Config(http=...) takes a class)."""

    class BoundedHttpTools(HttpToolsProtocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._head_bytes, self._parsed_head, self._in_head, self._timer, self._refused = 0, 0, True, None, False
            self._arm(header_timeout_s, 408)

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_head:
                self._head_bytes += len(data)
            elif self.cycle is not None and not self.cycle.response_complete and self.cycle.more_body:
                self._arm(body_timeout_s, None)  # the body moves: its stall timer starts again
            super().data_received(data)
            # Checked after parsing: the read that completed the headers may carry body bytes too.
            if self._in_head and self._head_bytes > max_header_bytes and not self.transport.is_closing():
                self._refuse(431, b"request headers too large")

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value) + 4)
            super().on_header(name, value)

        def _count(self, n: int) -> None:
            # A head that arrived in one read is parsed whole before data_received can look at it.
            self._parsed_head += n

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if not self._in_head:  # a pipelined or keep-alive request: its head is timed and counted anew
                self._in_head, self._head_bytes = True, 0
                self._arm(header_timeout_s, 408)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._disarm()
            too_large, self._parsed_head = self._parsed_head > max_header_bytes, 0
            if too_large or self._refused:
                self._refuse(431, b"request headers too large")
                return
            super().on_headers_complete()
            if self.cycle is not None and self.cycle.more_body:
                self._arm(body_timeout_s, None)

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            self._disarm()
            if not self._refused:
                super().on_message_complete()

        def _arm(self, seconds: float, status: int | None) -> None:
            self._disarm()
            self._timer = self.loop.call_later(seconds, self._expired, status)

        def _disarm(self) -> None:
            if getattr(self, "_timer", None) is not None:
                self._timer.cancel()
                self._timer = None

        def _expired(self, status: int | None) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            if status is None:  # a stalled body: the app sees a disconnect
                if self.cycle is not None:
                    self.cycle.disconnected = True
                    self.cycle.message_event.set()
                self.transport.close()
            else:
                self._refuse(status, b"request headers not received in time")

        def _refuse(self, status: int, message: bytes) -> None:
            if self._refused:
                return
            self._refused = True
            self.transport.write(STATUS_LINE[status] + b"content-type: text/plain; charset=utf-8\r\ncontent-length: "
                                 + str(len(message)).encode() + b"\r\nconnection: close\r\n\r\n" + message)
            self.transport.close()

    return BoundedHttpTools
