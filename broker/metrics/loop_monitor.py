"""Event-loop health: how late timers fire (lag) and how much of the time the loop waits for
I/O (Kafka's ``NetworkProcessorAvgIdlePercent``: the network threads' idle fraction; here the
one asyncio loop serves every connection, so its idle fraction is that number).

Idle time is measured around the selector's ``select`` call (the loop sleeps there when it
has nothing to do); a loop without a Python-level selector (e.g. uvloop) reports idle as
``1 - lag/interval`` instead. Both are averaged over the last ``WINDOW`` ticks.
"""

from __future__ import annotations

import asyncio
import collections
import time

__all__ = ["LoopMonitor"]

TICK_S = 0.25
WINDOW = 40  # ticks (10 s)


class LoopMonitor:
    def __init__(self) -> None:
        self.idle_ns = 0
        self._lags: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._idle: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._task: asyncio.Task | None = None
        self._selector = None
        self._orig_select = None

    @property
    def lag_seconds(self) -> float:
        """The largest timer lateness seen in the window (seconds)."""
        return max(self._lags, default=0.0)

    @property
    def idle_fraction(self) -> float:
        """Fraction (0..1) of the window the loop spent waiting for I/O."""
        if not self._idle:
            return 1.0
        return sum(self._idle) / len(self._idle)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        selector = getattr(loop, "_selector", None)
        if selector is not None and hasattr(selector, "select"):
            orig = selector.select
            monitor = self

            def select(timeout=None):
                t = time.perf_counter_ns()
                try:
                    return orig(timeout)
                finally:
                    monitor.idle_ns += time.perf_counter_ns() - t

            selector.select = select
            self._selector, self._orig_select = selector, orig
        self._task = loop.create_task(self._run(), name="loop-monitor")

    async def _run(self) -> None:
        measured = self._selector is not None
        last_idle = self.idle_ns
        last = time.perf_counter_ns()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.perf_counter_ns()
            wall = now - last
            lag = max(0.0, wall / 1e9 - TICK_S)
            self._lags.append(lag)
            if measured:
                idle = self.idle_ns - last_idle
                self._idle.append(min(1.0, idle / wall) if wall > 0 else 1.0)
            else:
                self._idle.append(max(0.0, 1.0 - lag / TICK_S))
            last_idle = self.idle_ns
            last = now

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._selector is not None:
            try:
                del self._selector.select  # the instance attribute; the class method is back
            except AttributeError:
                pass
            self._selector = None
