"""Timer tasks and the doubly linked bucket list they live in (Kafka's TimerTask, TimerTaskList).

A `TimerTask` is its own list node: Kafka wraps each task in a separate TimerTaskEntry, we
fold the entry into the task so that adding a timer allocates one object. A task is in at most
one `TimerTaskList` at a time (`task.is_pending`); adding it to another list (or re-adding it to
a timer) first unlinks it from the old one, so re-adding *moves* a task. Both `add` and removal
(`TimerTask.cancel`) are O(1).

Who may call: the timing wheel and timers of this package add and flush lists; anybody may
`cancel()` a task. Everything runs on one asyncio event loop thread; nothing here is
thread-safe, and nothing here blocks.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Iterator

__all__ = ["TimerTask", "TimerTaskList"]

_list_ids = itertools.count()


class TimerTask(abc.ABC):
    """A callback to run once, `delay_ms` milliseconds after it is added to a timer.

    Subclasses implement `run()`. The timer sets `expiration_ms` (absolute, on the timer's
    clock, in ms) when the task is added. `cancel()` takes the task out of its bucket in O(1)
    and returns True when it was pending; a cancelled task never runs unless it is added
    again.

    Raises `TypeError` when `delay_ms` is not an int (a float would break bucket arithmetic).
    A delay <= 0 means "already expired": the timer runs the task at once (MockTimer) or on
    the next loop iteration (SystemTimer).
    """

    # _next/_prev are only read while _list is set, so __init__ leaves them unset.
    __slots__ = ("delay_ms", "expiration_ms", "_list", "_next", "_prev")

    def __init__(self, delay_ms: int) -> None:
        if type(delay_ms) is not int:
            raise TypeError(f"delay_ms must be an int (milliseconds), got {delay_ms!r}")
        self.delay_ms = delay_ms
        self.expiration_ms = -1
        self._list: TimerTaskList | None = None

    @abc.abstractmethod
    def run(self) -> None:
        """Called by the timer when the task expires (once per add)."""

    def cancel(self) -> bool:
        """Remove the task from its timer bucket (O(1)). True if it was pending."""
        lst = self._list
        if lst is None:
            return False
        prev = self._prev
        nxt = self._next
        prev._next = nxt
        nxt._prev = prev
        self._list = None
        lst.size -= 1
        return True

    @property
    def is_pending(self) -> bool:
        """True while the task sits in a timer bucket waiting to expire."""
        return self._list is not None


class TimerTaskList:
    """One bucket of a timing wheel: a circular doubly linked list of `TimerTask`s.

    The list object is its own sentinel node (`_next` is the head, `_prev` the tail).
    `expiration_ms` is the start of the time span the bucket covers on its wheel, -1 while the
    bucket is not scheduled; `set_expiration` reports whether it changed, which is when the
    wheel must offer the bucket to the bucket queue (Kafka's `setExpiration` +
    `queue.offer`). `size` counts the tasks in the list.
    """

    __slots__ = ("_next", "_prev", "size", "expiration_ms", "order")

    def __init__(self) -> None:
        self._next: TimerTask | TimerTaskList = self
        self._prev: TimerTask | TimerTaskList = self
        self.size = 0
        self.expiration_ms = -1
        # Unique, fixed tie-breaker for the bucket heap (buckets are not orderable).
        self.order = next(_list_ids)

    def add(self, task: TimerTask) -> None:
        """Append `task` at the tail, first unlinking it from any list it is in. O(1)."""
        if task._list is not None:
            task.cancel()
        tail = self._prev
        task._prev = tail
        task._next = self
        tail._next = task
        self._prev = task
        task._list = self
        self.size += 1

    def remove(self, task: TimerTask) -> bool:
        """Unlink `task` if it is in this list. O(1). True if it was."""
        if task._list is not self:
            return False
        return task.cancel()

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiration; True if the value changed."""
        if self.expiration_ms == expiration_ms:
            return False
        self.expiration_ms = expiration_ms
        return True

    def flush(self, fn: Callable[[TimerTask], None]) -> None:
        """Remove every task, head first, calling `fn(task)` on each, then unschedule.

        Tasks are unlinked one at a time, so `fn` may cancel or re-add any task, including
        ones still waiting in this list.
        """
        while True:
            task = self._next
            if task is self:
                break
            task.cancel()
            fn(task)
        self.expiration_ms = -1

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[TimerTask]:
        """Iterate over a snapshot of the tasks, head first."""
        out = []
        node = self._next
        while node is not self:
            out.append(node)
            node = node._next
        return iter(out)

    def __repr__(self) -> str:
        return f"TimerTaskList(expiration_ms={self.expiration_ms}, size={self.size})"
