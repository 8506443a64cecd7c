"""The narrow timer a share-partition needs, and its adapter onto Josef's timing wheel.

A share-partition schedules two kinds of timeouts: acquisition-lock expiry
(`share.record.lock.duration.ms`) and, when redelivery backoff is on, the moment a released
record becomes Available again. Both are one-shot callbacks, so the interface is two methods:

    now_ms()                      the timer's monotonic clock, in ms
    schedule(delay_ms, callback)  run `callback()` once, `delay_ms` ms from now; returns a
                                  handle with `cancel()` (True if it was still pending) and
                                  `expiration_ms` (absolute, on the same clock)

`WheelShareTimer` maps it onto any `broker.purgatory.Timer` (the hierarchical timing wheel:
`SystemTimer` in the broker, `MockTimer` with a manual clock in tests), so no share-group
timeout is a scan: each is one O(1) entry in a wheel bucket. Callbacks run on the event loop
thread and must not block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from broker.purgatory.timer import Timer
from broker.purgatory.timer_task import TimerTask

__all__ = ["ScheduledTimeout", "ShareTimer", "WheelShareTimer"]


class ScheduledTimeout(Protocol):
    """A pending one-shot callback."""

    expiration_ms: int

    def cancel(self) -> bool:
        """Unschedule; True if it had not run yet."""


class ShareTimer(Protocol):
    """What a `SharePartition` needs from time: a clock and one-shot callbacks."""

    def now_ms(self) -> int:
        """Monotonic time in ms (not wall-clock)."""

    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> ScheduledTimeout:
        """Run `callback()` once after `delay_ms` ms (<= 0: as soon as the timer can)."""


class _CallbackTask(TimerTask):
    __slots__ = ("_callback",)

    def __init__(self, delay_ms: int, callback: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self._callback = callback

    def run(self) -> None:
        self._callback()


class WheelShareTimer:
    """`ShareTimer` over a purgatory `Timer` (one `TimerTask` per scheduled callback)."""

    __slots__ = ("_timer",)

    def __init__(self, timer: Timer) -> None:
        self._timer = timer

    def now_ms(self) -> int:
        return self._timer.now_ms()

    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> ScheduledTimeout:
        task = _CallbackTask(int(delay_ms), callback)
        self._timer.add(task)
        return task
