"""Timers over the hierarchical timing wheel: `SystemTimer` (asyncio) and `MockTimer` (manual).

Both hold a `TimingWheel` (tick 1 ms, wheel size 20 by default) and a `BucketQueue`; they
differ only in their clock and in who advances it:

- `SystemTimer`: the clock is the event loop's monotonic clock (`loop.time()`, in ms). One
  asyncio task sleeps until the earliest scheduled bucket expires (it is woken sooner when an
  earlier bucket is scheduled), then advances the wheel: it pops every expired bucket,
  re-adds their tasks (which moves them to lower levels) and runs the tasks that expired.
  Tasks that are already expired when added run on the next loop iteration (`call_soon`),
  never inside `add()`, like Kafka's SystemTimer hands them to its executor.
- `MockTimer`: the clock is a `MockTime` that only moves when told; `advance(ms)` (or Kafka's
  `advance_clock(timeout_ms)`) moves it and runs, in expiration order, every task now due.
  Tasks already expired when added run at once inside `add()`, as in Kafka's MockTimer.

Task callbacks run on the event loop thread and must not block. An exception in a task is
logged (SystemTimer) or re-raised after the advance finished (MockTimer); it never leaves the
wheel in a half-flushed state.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Protocol, runtime_checkable

from broker.purgatory.timer_task import TimerTask, TimerTaskList
from broker.purgatory.timing_wheel import BucketQueue, TimingWheel

__all__ = ["MockTime", "MockTimer", "SystemTimer", "Timer"]

log = logging.getLogger(__name__)

DEFAULT_TICK_MS = 1
DEFAULT_WHEEL_SIZE = 20


@runtime_checkable
class Timer(Protocol):
    """What the purgatory needs from a timer (Kafka's `kafka.utils.timer.Timer`)."""

    def add(self, task: TimerTask) -> None:
        """Schedule `task` to run `task.delay_ms` ms from now; re-adding a pending task moves it."""

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Run what is due. True if any bucket expired. See each timer for `timeout_ms`."""

    def now_ms(self) -> int:
        """The timer's clock, in ms (monotonic; not wall-clock time)."""

    @property
    def size(self) -> int:
        """Number of tasks pending in the timer."""

    def shutdown(self) -> None:
        """Stop the timer; pending tasks are dropped without running."""


class _WheelTimer:
    """Shared core: a wheel, its bucket queue, add / advance logic. Clock left to subclasses."""

    def __init__(self, start_ms: int, tick_ms: int, wheel_size: int) -> None:
        self._queue = BucketQueue()
        self._wheel = TimingWheel(tick_ms, wheel_size, start_ms, self._queue)
        self._closed = False

    def now_ms(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def _expired_on_add(self, task: TimerTask) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _run_task(self, task: TimerTask) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def add(self, task: TimerTask) -> None:
        """Schedule `task` at `now_ms() + task.delay_ms`. O(levels); moves a pending task."""
        if task._list is not None:
            task.cancel()
        if self._closed:
            raise RuntimeError("timer is shut down")
        delay = task.delay_ms
        task.expiration_ms = self.now_ms() + delay
        if delay <= 0 or not self._wheel.add(task):
            self._expired_on_add(task)

    def _reinsert(self, task: TimerTask) -> None:
        # Called on each task of a flushed bucket: move it down a level or run it.
        if not self._wheel.add(task):
            self._run_task(task)

    def _advance_to(self, now_ms: int) -> bool:
        """Flush every bucket expiring at or before `now_ms`, in expiration order."""
        queue = self._queue
        wheel = self._wheel
        bucket = queue.poll_expired(now_ms)
        if bucket is None:
            return False
        while bucket is not None:
            wheel.advance_clock(bucket.expiration_ms)
            bucket.flush(self._reinsert)
            bucket = queue.poll_expired(now_ms)
        if not len(queue):
            # Nothing is scheduled, so no bucket holds a task: catch the wheel up with the
            # clock so that the next timers do not start on a stale, coarser level.
            wheel.advance_clock(now_ms)
        return True

    @property
    def size(self) -> int:
        return self._wheel.size()

    @property
    def levels(self) -> int:
        """Number of wheel levels created so far (1 + overflow wheels)."""
        return len(self._wheel.levels())

    @property
    def scheduled_buckets(self) -> int:
        """Entries in the bucket queue (bounded by wheel_size x levels)."""
        return len(self._queue)

    def _drop_all(self) -> None:
        for wheel in self._wheel.levels():
            for bucket in wheel.buckets:
                while bucket._next is not bucket:
                    bucket._next.cancel()
                bucket.expiration_ms = -1
        self._queue.clear()


class SystemTimer(_WheelTimer):
    """Timing-wheel timer on the running asyncio loop (Kafka's SystemTimer).

    Must be created inside a running event loop; it starts its driver task at once. Clock:
    `now_ms() = int(loop.time() * 1000)`. A task fires between its expiration and about one
    tick (1 ms) plus loop latency after it; never earlier than its bucket's expiration.
    `advance_clock()` processes what is due now and never waits (the driver task is the one
    that waits); `timeout_ms` is accepted for the `Timer` protocol and ignored.
    """

    def __init__(
        self,
        name: str = "timer",
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
    ) -> None:
        self.name = name
        self._loop = asyncio.get_running_loop()
        # The stock loop's time() is a Python method returning time.monotonic(); call the C
        # function directly (one frame less per add). Other loops (uvloop) keep their own.
        if type(self._loop).time is asyncio.BaseEventLoop.time:
            self._loop_time = time.monotonic
        else:
            self._loop_time = self._loop.time
        super().__init__(self.now_ms(), tick_ms, wheel_size)
        self._queue.on_earliest = self._on_earliest
        self._ready = TimerTaskList()  # tasks expired on add, run by the next call_soon
        self._ready_scheduled = False
        self._waiter: asyncio.Future[None] | None = None
        self._wake_at: float = math.inf
        self._driver = self._loop.create_task(self._drive(), name=f"SystemTimer-{name}")

    def now_ms(self) -> int:
        return int(self._loop_time() * 1000)

    def add(self, task: TimerTask) -> None:
        """Schedule `task` at `now_ms() + task.delay_ms` (the base `add`, clock inlined)."""
        if task._list is not None:
            task.cancel()
        if self._closed:
            raise RuntimeError("timer is shut down")
        delay = task.delay_ms
        task.expiration_ms = int(self._loop_time() * 1000) + delay
        if delay <= 0 or not self._wheel.add(task):
            self._expired_on_add(task)

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        return self._advance_to(self.now_ms())

    @property
    def size(self) -> int:
        return self._wheel.size() + self._ready.size

    def _expired_on_add(self, task: TimerTask) -> None:
        self._ready.add(task)
        if not self._ready_scheduled:
            self._ready_scheduled = True
            self._loop.call_soon(self._run_ready)

    def _run_ready(self) -> None:
        self._ready_scheduled = False
        self._ready.flush(self._run_task)

    def _run_task(self, task: TimerTask) -> None:
        try:
            task.run()
        except Exception:
            log.exception("timer %s: task %r failed", self.name, task)

    def _on_earliest(self, expiration_ms: int) -> None:
        if expiration_ms < self._wake_at:
            self._wake_at = expiration_ms
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def _drive(self) -> None:
        loop = self._loop
        queue = self._queue
        while not self._closed:
            self._advance_to(self.now_ms())
            deadline = queue.peek_expiration()
            waiter = loop.create_future()
            self._waiter = waiter
            handle = None
            if deadline is None:
                self._wake_at = math.inf
            else:
                self._wake_at = deadline
                # +1 us so that float rounding cannot wake us a hair before the bucket is due.
                handle = loop.call_at(deadline / 1000 + 1e-6, _wake, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                if handle is not None:
                    handle.cancel()

    def shutdown(self) -> None:
        """Cancel the driver task and drop every pending task (none of them runs)."""
        if self._closed:
            return
        self._closed = True
        self._driver.cancel()
        self._drop_all()
        while self._ready._next is not self._ready:
            self._ready._next.cancel()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class MockTime:
    """A manual monotonic clock in ms (Kafka's MockTime): moves only on `sleep(ms)`."""

    __slots__ = ("_now_ms",)

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    def milliseconds(self) -> int:
        return self._now_ms

    def sleep(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"cannot move a clock backwards ({ms} ms)")
        self._now_ms += ms


class MockTimer(_WheelTimer):
    """The timing wheel on a manual clock, for deterministic tests (Kafka's MockTimer).

    `advance(ms)` moves the clock by `ms` and runs every task whose expiration is <= the new
    time, in expiration order (FIFO among tasks of one bucket). `advance_clock(timeout_ms)`
    is the same (Kafka's name). Tasks with delay <= 0 run immediately inside `add()`. If tasks
    raise, the remaining due tasks still run and the first exception is re-raised at the end.
    """

    def __init__(
        self,
        time: MockTime | None = None,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
    ) -> None:
        self.time = time if time is not None else MockTime()
        super().__init__(self.time.milliseconds(), tick_ms, wheel_size)
        self._errors: list[BaseException] = []

    def now_ms(self) -> int:
        return self.time._now_ms

    def _expired_on_add(self, task: TimerTask) -> None:
        task.run()

    def _run_task(self, task: TimerTask) -> None:
        try:
            task.run()
        except Exception as exc:
            self._errors.append(exc)

    def advance(self, ms: int) -> bool:
        """Move the clock forward by `ms` and run what is due; True if any bucket expired."""
        self.time.sleep(ms)
        return self.advance_clock(0)

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        if timeout_ms:
            self.time.sleep(timeout_ms)
        try:
            return self._advance_to(self.time._now_ms)
        finally:
            if self._errors:
                first = self._errors[0]
                self._errors.clear()
                raise first

    def shutdown(self) -> None:
        self._closed = True
        self._drop_all()
