"""`LoopSlice`: long loops on the event loop give way to other work every few milliseconds.

A request that touches thousands of topics or partitions (a Metadata storm's auto-creation,
a LeaderAndIsr for 100,000 partitions, a controller failover) must not hold the loop for
seconds: other connections' produce and fetch would wait that long. Such loops call
``await slice.tick()`` per item; it yields (``asyncio.sleep(0)``) once ``budget_ms`` of
wall time (default 5 ms) ran since the last yield, so the cost is one clock read per item.
`gather_staggered` starts many chunk tasks (a failover's elections and ZooKeeper writes) one
turn of the loop apart instead of all in one turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_BUDGET_MS = 5.0


class LoopSlice:
    __slots__ = ("budget_s", "_since", "yields")

    def __init__(self, budget_ms: float = DEFAULT_BUDGET_MS) -> None:
        self.budget_s = budget_ms / 1000.0
        self._since = time.monotonic()
        self.yields = 0

    def due(self) -> bool:
        """True once the budget is used up (for callers that yield themselves)."""
        return time.monotonic() - self._since >= self.budget_s

    async def tick(self) -> None:
        if time.monotonic() - self._since >= self.budget_s:
            await asyncio.sleep(0)
            self.yields += 1
            self._since = time.monotonic()


async def gather_staggered(aws: Iterable[Awaitable[T]], *, return_exceptions: bool = False
                           ) -> list[T]:
    """`asyncio.gather`, except that each awaitable starts in a turn of the loop of its own.

    With plain `gather` every task's first step (the work before its first real wait, e.g.
    working out a chunk of elections and building its ZooKeeper multi, 10-20 ms) runs in the
    same turn of the loop: 33 chunks hold the loop for half a second, and no request of any
    other connection is read meanwhile. Here the loop turns (polling sockets) between the
    chunks, and the results of the first chunks are taken in while the later ones start.
    Results are in the order of ``aws``. Cancelled while starting them: the started ones are
    cancelled too."""
    tasks: list[asyncio.Future] = []
    try:
        for aw in aws:
            tasks.append(asyncio.ensure_future(aw))
            await asyncio.sleep(0)
    except BaseException:
        for t in tasks:
            t.cancel()
        raise
    return await asyncio.gather(*tasks, return_exceptions=return_exceptions)
