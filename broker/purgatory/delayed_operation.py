"""Delayed operations and the purgatory that parks them (Kafka's DelayedOperation(Purgatory)).

A request that cannot be answered yet (a fetch short of `fetch.min.bytes`, an acks=-1 produce
waiting for the high watermark, a JoinGroup waiting for members) becomes a `DelayedOperation`
parked in a `DelayedOperationPurgatory`: it *watches* typed keys (a topic-partition, a group, a
member) and sits in the purgatory's timer. Whoever changes the state an operation waits for
calls `check_and_complete(key)` (e.g. the ReplicaManager after an append or a high-watermark
move); the timer expires it otherwise. Either way it completes exactly once.

Single-threaded (one asyncio loop), but completion callbacks may re-enter the purgatory (an
`on_complete` that appends to a log triggers `check_and_complete` on the same key); both the
operation (`maybe_try_complete`) and each watch list guard against re-entrancy by recording a
pending retry instead of recursing, as Kafka's `tryCompletePending` flag does across threads.
"""

from __future__ import annotations

import abc
from collections.abc import Hashable, Iterable
from typing import NamedTuple

from broker.metrics.broker_gauges import track_purgatory
from broker.purgatory.timer import Timer
from broker.purgatory.timer_task import TimerTask

__all__ = [
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "TopicPartitionKey",
    "FetchSessionKey",
]

_MISSING = object()


class TopicPartitionKey(NamedTuple):
    """Watch key of DelayedFetch / DelayedProduce (Kafka's TopicPartitionOperationKey)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class FetchSessionKey(NamedTuple):
    """Watch key of a DelayedFetch of an incremental fetch session (KIP-227): checked when a
    partition of the session changes (broker.fetch_session.FetchSessionCache.partition_changed)."""

    session_id: int

    def __str__(self) -> str:
        return f"fetch-session-{self.session_id}"


class DelayedOperation(TimerTask):
    """An operation that completes once: by `try_complete` succeeding, or at its deadline.

    Life cycle. The purgatory calls `maybe_try_complete()` (which calls `try_complete()`),
    watches the keys, tries again, then adds the operation to the timer with `delay_ms`
    (the request's `max.wait.ms` / `timeout.ms`). Later, `check_and_complete(key)` calls
    `maybe_try_complete()` again each time the watched state may have changed, and the timer
    calls `run()` at the deadline. Exactly one completion path wins:

    - `force_complete()` returns True only to its first caller; it marks the operation
      completed, cancels its timer task and calls `on_complete()`.
    - `run()` (timer expiry) marks the operation completed, then calls `on_expiration()` and
      then `on_complete()`. (Kafka calls onComplete before onExpiration; we expire first so a
      subclass can set its timeout error, e.g. REQUEST_TIMED_OUT, before building the
      response in `on_complete`.)
    - once completed, `maybe_try_complete()` returns False without calling `try_complete`.

    Writing a subclass (DelayedFetch, DelayedProduce, DelayedJoin, DelayedHeartbeat):

    - `try_complete()` checks whether the operation can complete now and, if so, returns
      `self.force_complete()`; otherwise returns False. Its docstring lists every completion
      case with a letter, each with the condition and the error code it answers with, as
      Kafka's DelayedFetch does. For example::

          def try_complete(self) -> bool:
              '''Complete when one of these holds:

              Case A: this broker is no longer the leader of a partition -> that partition
                      answers NOT_LEADER_OR_FOLLOWER.
              Case B: the partition was deleted -> UNKNOWN_TOPIC_OR_PARTITION.
              Case C: the bytes readable up to the high watermark reach fetch.min.bytes ->
                      NONE with the data.
              (Case D, the deadline, is `on_expiration`: whatever is there, NONE.)
              '''

    - `on_complete()` sends the response (e.g. resolves a future the handler awaits); it
      runs exactly once, must not block, and may safely re-enter the purgatory.
    - `on_expiration()` records the timeout (metrics, error code); default does nothing.
    - Subclasses keep identity equality and hashing (do not define `__eq__`): the purgatory
      keys its watch lists by the operation object.

    `delay_ms` is in milliseconds. Not thread-safe: use from the event loop thread only.
    """

    __slots__ = ("_completed", "_trying", "_try_pending", "_keys", "_purgatory")

    def __init__(self, delay_ms: int) -> None:
        if type(delay_ms) is not int:
            raise TypeError(f"delay_ms must be an int (milliseconds), got {delay_ms!r}")
        self.delay_ms = delay_ms
        self.expiration_ms = -1
        self._list = None
        self._completed = False
        self._trying = False
        self._try_pending = False
        self._keys: tuple[Hashable, ...] | None = None
        self._purgatory: DelayedOperationPurgatory | None = None

    @abc.abstractmethod
    def try_complete(self) -> bool:
        """Complete (via `force_complete()`) if possible now; list cases A, B, C... here."""

    @abc.abstractmethod
    def on_complete(self) -> None:
        """Called exactly once, when the operation completes (by any path)."""

    def on_expiration(self) -> None:  # noqa: B027 - optional hook, default no-op
        """Called once when the timer expires the operation, just before `on_complete`."""

    @property
    def is_completed(self) -> bool:
        return self._completed

    def _mark_completed(self) -> bool:
        # The one place an operation becomes completed: cancel the timer, tell the purgatory.
        # (force_complete inlines it, this being the hot path of every completion.)
        if self._completed:
            return False
        self._completed = True
        if self._list is not None:
            self.cancel()
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._operation_completed(self)
        return True

    def force_complete(self) -> bool:
        """Complete now; True only for the call that actually completed the operation."""
        if self._completed:
            return False
        self._completed = True
        lst = self._list
        if lst is not None:  # TimerTask.cancel, inlined
            prev = self._prev
            nxt = self._next
            prev._next = nxt
            nxt._prev = prev
            self._list = None
            lst.size -= 1
        purgatory = self._purgatory
        if purgatory is not None:
            if self is purgatory._scanning and len(self._keys) == 1:
                purgatory._pending -= 1  # _operation_completed's fast path, inlined
            else:
                purgatory._operation_completed(self)
        self.on_complete()
        return True

    def run(self) -> None:
        """Timer expiry: complete with `on_expiration()` then `on_complete()`, unless done."""
        if self._mark_completed():
            self.on_expiration()
            self.on_complete()

    def maybe_try_complete(self) -> bool:
        """Call `try_complete()` unless completed; re-entrancy safe. True if this call completed.

        If `try_complete` (through callbacks) re-enters this method for the same operation,
        the inner call only records that a retry is due and returns False; the outer call then
        runs `try_complete` again once it returns, so no state change is missed (Kafka's
        `maybeTryComplete` / `tryCompletePending`).
        """
        if self._completed:
            return False
        if self._trying:
            self._try_pending = True
            return False
        self._trying = True
        try:
            self._try_pending = False
            done = self.try_complete()
            while self._try_pending and not done and not self._completed:
                self._try_pending = False
                done = self.try_complete()
        finally:
            self._trying = False
        return done

    safe_try_complete = maybe_try_complete

    def __repr__(self) -> str:
        state = "completed" if self._completed else "pending"
        return f"<{type(self).__name__} delay_ms={self.delay_ms} {state}>"


class _Watchers:
    """The operations watching one key, in arrival order (dict used as an ordered set)."""

    __slots__ = ("ops", "checking", "check_pending")

    def __init__(self) -> None:
        self.ops: dict[DelayedOperation, None] = {}
        self.checking = False
        self.check_pending = False


class DelayedOperationPurgatory:
    """Operations waiting on keys and on a timer (Kafka's DelayedOperationPurgatory).

    `name` labels logs/metrics ("Fetch", "Produce", "Rebalance", "Heartbeat"). `timer` is any
    `Timer` (a `SystemTimer` in the broker, a `MockTimer` in tests); the purgatory never
    shuts it down. Keys are hashable values of one type per purgatory: `TopicPartitionKey`,
    `FetchSessionKey`, or the group coordinator's `coordinator.keys.GroupKey` / `MemberKey`.

    Purging (Kafka's expiration reaper, without a thread): an operation that completes while
    still watched - by its deadline, by `force_complete`, or through another of its keys - stays
    in the other keys' watch lists until `check_and_complete` on those keys drops it. The
    purgatory remembers such operations; once more than `purge_interval` of them have
    accumulated, `purge_completed()` removes them from every list they are still on and drops
    lists left empty. This runs inline at the end of the outermost purgatory call (or at the
    completion itself when no purgatory call is in progress), costs O(keys) per purged
    operation rather than a scan of every list, and bounds garbage to `purge_interval`
    operations (Kafka's `*.purgatory.purge.interval.requests`, default 1000).
    """

    def __init__(self, name: str, timer: Timer, purge_interval: int = 1000) -> None:
        if purge_interval < 1:
            raise ValueError(f"purge_interval must be >= 1, got {purge_interval}")
        self.name = name
        self.timer = timer
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, _Watchers] = {}
        self._watched = 0  # (operation, key) entries in watch lists
        self._pending = 0  # watched operations neither completed nor cancelled
        self._completed_watched: list[DelayedOperation] = []
        self._depth = 0  # nesting of check_and_complete calls in progress
        self._scanning: DelayedOperation | None = None  # op being tried by check_and_complete
        self._closed = False
        track_purgatory(self)  # PurgatorySize / NumDelayedOperations, while this one lives

    @property
    def watched(self) -> int:
        """Entries in all watch lists (an operation watching 2 keys counts twice)."""
        return self._watched

    @property
    def delayed(self) -> int:
        """Operations parked here that have neither completed nor been cancelled."""
        return self._pending

    @property
    def num_keys(self) -> int:
        """Keys that currently have a watch list."""
        return len(self._watchers)

    def watches(self, key: Hashable) -> bool:
        """True if some operation watches `key` (a TopicPartitionKey equals its plain
        (topic, partition) tuple)."""
        return key in self._watchers

    def watchers_for(self, key: Hashable) -> list[DelayedOperation]:
        """Snapshot of the operations watching `key` (completed ones not yet dropped included)."""
        w = self._watchers.get(key)
        return list(w.ops) if w is not None else []

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete `op` now if possible, else watch it under every key and start its timer.

        Order (Kafka's, which closes the race with a state change between the two tries):
        try; watch under each key; try again; add to the timer. Returns True if this call
        completed the operation, False if it was parked (or completed by someone else).
        Raises ValueError for no keys or an operation already watched, RuntimeError after
        `shutdown()`.
        """
        if self._closed:
            raise RuntimeError(f"purgatory {self.name} is shut down")
        if type(keys) is not tuple:
            keys = tuple(keys)
        if not keys:
            raise ValueError("an operation must watch at least one key")
        if op._keys is not None:
            raise ValueError(f"{op!r} is already watched")
        if len(keys) > 1:
            keys = tuple(dict.fromkeys(keys))
        if op._completed or op._trying:
            done = op.maybe_try_complete()
        else:
            op._trying = True  # maybe_try_complete, inlined (hot path)
            try:
                done = op.try_complete()
            finally:
                op._trying = False
            if op._try_pending and not done and not op._completed:
                done = op.maybe_try_complete()
        if done:
            return True
        if op._completed:
            return False
        self._add_watches(op, keys)
        if op._trying:
            done = op.maybe_try_complete()
        else:
            op._trying = True  # maybe_try_complete, inlined (hot path)
            try:
                done = op.try_complete()
            finally:
                op._trying = False
            if op._try_pending and not done and not op._completed:
                done = op.maybe_try_complete()
        if done:
            return True
        if not op._completed:
            self.timer.add(op)
        return False

    def _add_watches(self, op: DelayedOperation, keys: tuple) -> None:
        op._keys = keys
        op._purgatory = self
        self._pending += 1
        watchers = self._watchers
        for key in keys:
            w = watchers.get(key)
            if w is None:
                w = watchers[key] = _Watchers()
            w.ops[op] = None
        self._watched += len(keys)

    def watch(self, op: DelayedOperation, keys: tuple) -> None:
        """Watch `op` under `keys` and start its timer without trying it: for a caller that
        has just found it incomplete, on this event loop, with nothing run in between (a
        DelayedFetch right after its first read; saves `try_complete_else_watch`'s two
        tries). ValueError / RuntimeError as `try_complete_else_watch`."""
        if self._closed:
            raise RuntimeError(f"purgatory {self.name} is shut down")
        if not keys or op._keys is not None:
            raise ValueError(f"{op!r}: no keys, or already watched")
        self._add_watches(op, keys)
        self.timer.add(op)

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete every operation watching `key`; return how many this call completed.

        Call it after anything an operation on `key` may be waiting for changed (append,
        high-watermark move, leader change, group state change). Completed operations leave
        the list, and the list is dropped when empty. A re-entrant call for the same key
        (from a completion callback) returns 0 and makes the running call scan once more.
        """
        w = self._watchers.get(key)
        if w is None:
            return 0
        if w.checking:
            w.check_pending = True
            return 0
        ops = w.ops
        completed = 0
        dropped = 0
        scanning = self._scanning
        self._depth += 1
        w.checking = True
        try:
            while True:
                w.check_pending = False
                for op in list(ops):
                    if op._completed:
                        pass
                    elif op._trying:  # re-entered while trying: the outer try retries
                        op._try_pending = True
                    else:
                        self._scanning = op
                        op._trying = True  # maybe_try_complete, inlined (hot path)
                        try:
                            done = op.try_complete()
                        finally:
                            op._trying = False
                        if op._try_pending and not done and not op._completed:
                            done = op.maybe_try_complete()
                        if done:
                            completed += 1
                    if op._completed and ops.pop(op, _MISSING) is not _MISSING:
                        dropped += 1
                if not w.check_pending:
                    break
        finally:
            w.checking = False
            self._depth -= 1
            self._scanning = scanning
            self._watched -= dropped
        if not ops and self._watchers.get(key) is w:
            del self._watchers[key]
        if self._depth == 0 and len(self._completed_watched) > self.purge_interval:
            self.purge_completed()
        return completed

    def check_and_complete_many(self, keys: Iterable[Hashable]) -> int:
        """`check_and_complete` for many keys at once, each operation watching any of them
        tried once: a LeaderAndIsr changing 100,000 partitions would otherwise try a follower
        fetch parked on all of them once per partition, each try looking at all of them
        (quadratic: a broker stalled for hours). Completed operations leave the watch lists
        on their keys' next check or the purge. Returns the number completed."""
        seen: dict[int, DelayedOperation] = {}
        watchers = self._watchers
        for key in keys:
            w = watchers.get(key)
            if w is not None:
                for op in w.ops:
                    seen[id(op)] = op
        completed = 0
        for op in seen.values():
            if not op._completed and op.maybe_try_complete():
                completed += 1
        return completed

    def _operation_completed(self, op: DelayedOperation) -> None:
        # Called once by a watched operation when it completes, by whatever path.
        self._pending -= 1
        if op is self._scanning and len(op._keys) == 1:
            return  # the scan of its only key drops it right away: nothing left to purge
        done = self._completed_watched
        done.append(op)
        if len(done) > self.purge_interval and self._depth == 0:
            self.purge_completed()

    def purge_completed(self) -> int:
        """Drop completed operations from every watch list they are on; return entries removed."""
        done = self._completed_watched
        if not done:
            return 0
        self._completed_watched = []
        watchers = self._watchers
        purged = 0
        for op in done:
            for key in op._keys:
                w = watchers.get(key)
                if w is not None and w.ops.pop(op, _MISSING) is not _MISSING:
                    purged += 1
                    if not w.ops and not w.checking:
                        del watchers[key]
        self._watched -= purged
        return purged

    def cancel_for_key(self, key: Hashable) -> list[DelayedOperation]:
        """Stop watching `key`: cancel the timers of its pending operations and return them.

        The returned operations are not completed (no callback runs); the caller answers them
        (e.g. when a partition is deleted or leadership moves away).
        """
        w = self._watchers.pop(key, None)
        if w is None:
            return []
        ops = list(w.ops)
        w.ops.clear()
        self._watched -= len(ops)
        cancelled = []
        for op in ops:
            if op._completed:
                continue
            op.cancel()
            if op._purgatory is self:
                op._purgatory = None
                self._pending -= 1
            cancelled.append(op)
        return cancelled

    def shutdown(self) -> None:
        """Cancel the timers of all parked operations and forget them; later parking raises."""
        self._closed = True
        for key in list(self._watchers):
            self.cancel_for_key(key)
        self._completed_watched = []

    def __repr__(self) -> str:
        return (
            f"DelayedOperationPurgatory({self.name!r}, watched={self._watched}, "
            f"delayed={self._pending}, keys={len(self._watchers)})"
        )
