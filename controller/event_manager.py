"""ControllerEventManager: the one queue that serialises all controller work (Kafka's).

Every ZooKeeper watch, session event, broker request (ControlledShutdown, AlterPartition,
ElectLeaders, reassignments) and timer becomes a :class:`ControllerEvent` put on one FIFO
queue; a single asyncio task takes them one at a time and awaits ``processor(event)``, so no
two pieces of controller work ever interleave, even across the awaits of ZooKeeper calls.

``clear_and_put(event)`` drops everything queued (each dropped event's ``preempt()`` answers
its waiting caller, e.g. NOT_CONTROLLER) and queues ``event`` (session expiry: resign first).
``QueuedEvent.processing_started`` is set when the event is taken. ``state`` names the event
being processed ("Idle" otherwise); ``queue_time_ms`` and ``process_time_ms`` keep the last
queueing delays and processing times; an event slower than ``SLOW_EVENT_MS`` is logged.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable

__all__ = ["ControllerEvent", "ControllerEventManager", "QueuedEvent"]

log = logging.getLogger(__name__)

#: events taking longer are logged at INFO with their processing time
SLOW_EVENT_MS = 200


class ControllerEvent:
    """Base of the controller's events. ``state`` is Kafka's ControllerState name."""

    state = "Idle"

    def preempt(self) -> None:
        """Called instead of processing when the queue is cleared (answer any waiter)."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k != "future")
        return f"{type(self).__name__}({fields})"


class QueuedEvent:
    __slots__ = ("event", "enqueue_ms", "processing_started")

    def __init__(self, event: ControllerEvent) -> None:
        self.event = event
        self.enqueue_ms = time.monotonic() * 1000
        self.processing_started = asyncio.Event()


class ControllerEventManager:
    def __init__(self, controller_id: int,
                 processor: Callable[[ControllerEvent], Awaitable[None]]) -> None:
        self.controller_id = controller_id
        self.processor = processor
        self._queue: collections.deque[QueuedEvent] = collections.deque()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False
        self.state = "Idle"
        self.queue_time_ms: collections.deque[float] = collections.deque(maxlen=1000)
        #: (event name, processing time in ms) of the last events (Kafka's per-state timers)
        self.process_time_ms: collections.deque[tuple[str, float]] = \
            collections.deque(maxlen=1000)
        self.processed = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-event-thread-{self.controller_id}")

    async def close(self) -> None:
        """Stop after the event being processed; queued events are preempted."""
        self._closed = True
        self._preempt_all()
        self._wakeup.set()
        task = self._task
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def put(self, event: ControllerEvent) -> QueuedEvent:
        queued = QueuedEvent(event)
        if self._closed:
            event.preempt()
            return queued
        self._queue.append(queued)
        self._wakeup.set()
        return queued

    def clear_and_put(self, event: ControllerEvent) -> QueuedEvent:
        self._preempt_all()
        return self.put(event)

    def _preempt_all(self) -> None:
        while self._queue:
            q = self._queue.popleft()
            try:
                q.event.preempt()
            except Exception:
                log.exception("preempting %r failed", q.event)

    def is_empty(self) -> bool:
        return not self._queue

    def __len__(self) -> int:
        return len(self._queue)

    async def _run(self) -> None:
        while not self._closed:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            q = self._queue.popleft()
            q.processing_started.set()
            self.queue_time_ms.append(time.monotonic() * 1000 - q.enqueue_ms)
            self.state = getattr(q.event, "state", type(q.event).__name__)
            started = time.monotonic()
            try:
                await self.processor(q.event)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Uncaught error processing event %r", q.event)
            finally:
                took_ms = (time.monotonic() - started) * 1000
                self.process_time_ms.append((type(q.event).__name__, took_ms))
                if took_ms >= SLOW_EVENT_MS:
                    log.info("processed %s in %.0f ms", type(q.event).__name__, took_ms)
                self.state = "Idle"
                self.processed += 1
