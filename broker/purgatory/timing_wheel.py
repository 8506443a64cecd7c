"""Hierarchical timing wheel and its bucket queue (Kafka's TimingWheel and DelayQueue).

Follows the design of Kafka's `kafka.utils.timer` package (KAFKA-1430 "Purgatory redesign"):
O(1) insert and cancel, and a priority queue that holds *buckets*, not tasks, so its size is
bounded by wheel_size x levels however many timers are pending.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from broker.purgatory.timer_task import TimerTask, TimerTaskList

__all__ = ["BucketQueue", "TimingWheel"]


class BucketQueue:
    """Min-heap of scheduled buckets by expiration (the role of Kafka's `DelayQueue`).

    A bucket is offered when its expiration changes (it then is not in the heap: buckets
    leave the heap when they are polled and flushed), so each bucket appears at most once.
    Heap entries are `(expiration_ms, bucket.order, bucket)`. Cancelling every task of a
    bucket leaves the (empty) bucket scheduled; it is popped and flushed as a no-op.

    `on_earliest(expiration_ms)` is called when an offered bucket becomes the earliest one, so
    a driver sleeping until the previous earliest expiration can wake up sooner.
    """

    __slots__ = ("_heap", "on_earliest")

    def __init__(self, on_earliest: Callable[[int], None] | None = None) -> None:
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self.on_earliest = on_earliest

    def offer(self, bucket: TimerTaskList) -> None:
        heap = self._heap
        entry = (bucket.expiration_ms, bucket.order, bucket)
        heapq.heappush(heap, entry)
        if heap[0] is entry and self.on_earliest is not None:
            self.on_earliest(entry[0])

    def poll_expired(self, now_ms: int) -> TimerTaskList | None:
        """Pop and return the earliest bucket if its expiration is <= now_ms, else None."""
        heap = self._heap
        if heap and heap[0][0] <= now_ms:
            return heapq.heappop(heap)[2]
        return None

    def peek_expiration(self) -> int | None:
        """Expiration (ms) of the earliest scheduled bucket, or None when empty."""
        heap = self._heap
        return heap[0][0] if heap else None

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)


class TimingWheel:
    """One level of a hierarchical timing wheel; higher levels are created on demand.

    A wheel of `wheel_size` buckets, each `tick_ms` wide, covers `interval_ms = tick_ms *
    wheel_size` from `current_time_ms` (always a multiple of `tick_ms`). A task whose
    expiration falls within that span goes into bucket `(expiration // tick_ms) % wheel_size`
    of this wheel, whose expiration becomes `(expiration // tick_ms) * tick_ms`; a task beyond
    the span goes to the *overflow wheel*, whose tick is this wheel's interval. A task with
    `expiration < current_time_ms + tick_ms` has expired and is not added (`add` returns
    False; the timer runs it).

    Time moves only through `advance_clock(bucket_expiration)` when the timer pops an expired
    bucket from the `BucketQueue`. The timer then flushes the bucket, re-adding each task:
    tasks of a higher level bucket fall into finer buckets of lower levels, tasks of a
    level-0 bucket have expired and run. Precision is one tick of the level-0 wheel.

    Worked example (Josef's settings: tick 1 ms, wheel size 20, start at t=0 ms):

        level  tick_ms   interval_ms   buckets cover
        0      1         20            [0, 20) ms, one ms each
        1      20        400           [0, 400) ms, 20 ms each
        2      400       8 000         [0, 8) s, 400 ms each
        3      8 000     160 000       [0, 160) s, 8 s each
        4      160 000   3 200 000     [0, 53.3) min, 160 s each
        5      3.2e6     6.4e7         [0, 17.8) h: a 1 h timer lands here

    A 15 ms timer (expiration 15) goes straight to level 0, bucket 15, expiring at 15.
    A 450 ms timer (expiration 450) is beyond level 0 (450 >= 0 + 20) and level 1
    (450 >= 0 + 400); on level 2, 450 // 400 = 1, so it waits in level-2 bucket 1, whose
    expiration is 400. Only the creation of levels 1 and 2 and one list insert happen.
      t=400: the bucket queue yields that bucket; every level advances to 400 (level 0 and 1
             to 400, level 2 to 400); re-adding the task: level 0 covers [400, 420), no;
             level 1 covers [400, 800): 450 // 20 = 22, bucket 22 % 20 = 2, expiration 440.
      t=440: that level-1 bucket expires; level 0 now covers [440, 460): 450 // 1 = 450,
             bucket 450 % 20 = 10, expiration 450.
      t=450: the level-0 bucket expires; re-adding finds 450 < 450 + 1: expired, so it runs.
    Three bucket hops for a 450 ms timer, each O(1); a 1 h timer takes at most six.
    Meanwhile the bucket queue held at most one entry per non-empty bucket, never one per
    timer.

    Bucket reuse is safe: while a bucket is scheduled, every task that maps to it has the same
    virtual bucket id (`expiration // tick_ms`), because a level spans exactly wheel_size ticks
    from its current time, and its current time only passes a bucket's expiration after the
    bucket was popped and flushed.
    """

    __slots__ = (
        "tick_ms",
        "wheel_size",
        "interval_ms",
        "current_time_ms",
        "buckets",
        "queue",
        "overflow_wheel",
        "level",
    )

    def __init__(
        self, tick_ms: int, wheel_size: int, start_ms: int, queue: BucketQueue, level: int = 0
    ) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError(f"need tick_ms >= 1 and wheel_size >= 2, got {tick_ms}, {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms
        self.buckets = [TimerTaskList() for _ in range(wheel_size)]
        self.queue = queue
        self.overflow_wheel: TimingWheel | None = None
        self.level = level

    def _add_overflow_wheel(self) -> TimingWheel:
        if self.overflow_wheel is None:
            self.overflow_wheel = TimingWheel(
                self.interval_ms, self.wheel_size, self.current_time_ms, self.queue, self.level + 1
            )
        return self.overflow_wheel

    def add(self, task: TimerTask) -> bool:
        """Put `task` (not in any list, `expiration_ms` set) in its bucket on the right level.

        Returns False, leaving the task unlinked, when it has already expired. O(levels), with
        the list insert and bucket scheduling inlined (this is the hot path of every timer).
        """
        exp = task.expiration_ms
        wheel = self
        if exp < wheel.current_time_ms + wheel.tick_ms:
            return False
        while exp >= wheel.current_time_ms + wheel.interval_ms:
            nxt = wheel.overflow_wheel
            wheel = nxt if nxt is not None else wheel._add_overflow_wheel()
        tick = wheel.tick_ms
        virtual_id = exp // tick
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        # TimerTaskList.add, inlined
        tail = bucket._prev
        task._prev = tail
        task._next = bucket
        tail._next = task
        bucket._prev = task
        task._list = bucket
        bucket.size += 1
        bucket_exp = virtual_id * tick
        if bucket.expiration_ms != bucket_exp:
            bucket.expiration_ms = bucket_exp
            self.queue.offer(bucket)
        return True

    def advance_clock(self, time_ms: int) -> None:
        """Move this level (and, when it moves, the levels above) to `time_ms`, truncated."""
        wheel = self
        while wheel is not None and time_ms >= wheel.current_time_ms + wheel.tick_ms:
            wheel.current_time_ms = time_ms - time_ms % wheel.tick_ms
            wheel = wheel.overflow_wheel

    def levels(self) -> list[TimingWheel]:
        """This wheel and every overflow wheel above it, lowest first."""
        out = []
        wheel: TimingWheel | None = self
        while wheel is not None:
            out.append(wheel)
            wheel = wheel.overflow_wheel
        return out

    def size(self) -> int:
        """Tasks in all buckets of all levels (O(wheel_size x levels))."""
        return sum(b.size for w in self.levels() for b in w.buckets)
