"""`LoopSlice`: long loops on the event loop give way to other work every few milliseconds.

A request that touches thousands of topics or partitions (a Metadata storm's auto-creation,
a LeaderAndIsr for 100,000 partitions, a controller failover) must not hold the loop for
seconds: other connections' produce and fetch would wait that long. Such loops call
``await slice.tick()`` per item; it yields (``asyncio.sleep(0)``) once ``budget_ms`` of
wall time (default 5 ms) ran since the last yield, so the cost is one clock read per item.
"""

from __future__ import annotations

import asyncio
import time

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
