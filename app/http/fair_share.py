"""Each client address's share of the request queue (--max-queue texts).

The queue was first come, first served: 16 clients sending 64 texts each kept it full and gave a 5th client
12% 429s. Now an address may have at most `max_queue / k` texts in flight, k the addresses that sent a request
in the last WINDOW_S seconds (never less than --max-texts, so a full request always fits): alone, an address
may fill the queue as before; while others are about, what it holds past its share is refused (429) and the
others always find room. The floor lets the shares add up to more than the queue (16 addresses x 64 texts
filled a 512-text queue and the small client still got 57% 429s, measured by bench/queue_share.py, removed; git history), so the
queue's last --max-texts places go only to requests within their address's fair slice (max_queue / k): a
request past its slice waits for the queue to have room beyond them. Clients behind one proxy (or one NAT) count as one address unless the proxy is
trusted (--forwarded-allow-ips), and all loopback clients are one address.
"""

from __future__ import annotations

import time
from collections import OrderedDict

WINDOW_S = 10.0


class FairShare:
    def __init__(self, max_queue: int, min_share: int, window_s: float = WINDOW_S, clients: int = 10_000):
        self.max_queue, self.min_share, self.window_s, self.clients = max_queue, min_share, window_s, clients
        self.held: dict[str, int] = {}  # address -> texts in flight (queued or computing)
        self._recent: OrderedDict[str, float] = OrderedDict()  # address -> its last request, oldest first

    def _active(self, client: str) -> int:
        now = time.monotonic()
        self._recent[client] = now
        self._recent.move_to_end(client)
        while self._recent and (now - next(iter(self._recent.values())) > self.window_s
                                or len(self._recent) > self.clients):
            self._recent.popitem(last=False)
        return len(self._recent)

    def share(self, client: str) -> tuple[int, int]:
        """(texts `client` may have in flight now, addresses sharing the queue); counts `client` as active."""
        active = self._active(client)
        return max(self.min_share, self.max_queue // active), active

    def admit(self, client: str, n: int) -> tuple[int, int] | None:
        """Take `n` texts of `client` in, or (its share, addresses sharing) when that would pass its share.
        Pair an admission with `release`."""
        share, active = self.share(client)
        held = self.held.get(client, 0)
        if held + n > share:
            return share, active
        fair = self.max_queue // active
        if active > 1 and held + n > fair and sum(self.held.values()) + n > self.max_queue - self.min_share:
            return fair, active  # the queue's last places are kept for requests within their fair slice
        # (alone, an address's slice is the whole queue: a request past it is the queue's 429, "queue_full")
        self.held[client] = held + n
        return None

    def release(self, client: str, n: int) -> None:
        left = self.held.get(client, 0) - n
        if left > 0:
            self.held[client] = left
        else:
            self.held.pop(client, None)
