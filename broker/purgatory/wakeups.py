"""`PartitionWakeups`: what the ReplicaManager does after a partition changed, once per
event-loop turn (issue 21).

Appends, high-watermark moves, follower progress, leadership changes and deletions report
the partition here (`note(tp, produce)`) instead of checking the purgatories at once. At the
end of the turn (one `loop.call_soon` per batch) each noted partition is handed once to:

1. the fetch sessions (`FetchSessionCache.partition_changed`, KIP-227): each session holding
   it reads it at its next fetch, or its parked fetch takes it in; every session with a parked
   fetch is then checked once (`FetchSessionKey`);
2. the fetch purgatory under `TopicPartitionKey` (sessionless / full fetches);
3. the produce purgatory under `TopicPartitionKey` when the note asked for it (a high
   watermark move, a leadership change, a shrink of the ISR): acks=-1 produces waiting for
   the HW, or for `NOT_ENOUGH_REPLICAS_AFTER_APPEND` / `NOT_LEADER_OR_FOLLOWER`.

So five produce requests handled in one turn wake a parked follower fetch once, with all five
batches to read, and a follower fetch that moved the HW of several partitions completes the
waiting produces in one pass. Kafka's semantics hold: the HW itself moves at once (only the
completions wait for the end of the turn), it never goes backwards, and a DelayedProduce
still answers only when every partition of its request is covered.

Without a running loop (synchronous callers) the wakeups run at once. `flush()` runs them
now (tests, shutdown).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.purgatory.delayed_operation import FetchSessionKey, TopicPartitionKey

__all__ = ["PartitionWakeups"]

TopicPartition = tuple[str, int]


class PartitionWakeups:
    """`fetch_purgatory` / `produce_purgatory`: DelayedOperationPurgatory; `sessions()`
    returns the FetchSessionCache (or None) at flush time."""

    __slots__ = ("fetch_purgatory", "produce_purgatory", "sessions", "_fetch", "_produce",
                 "_scheduled", "closed", "flushes")

    def __init__(self, fetch_purgatory, produce_purgatory,
                 sessions: Callable[[], object | None]) -> None:
        self.fetch_purgatory = fetch_purgatory
        self.produce_purgatory = produce_purgatory
        self.sessions = sessions
        self._fetch: dict[TopicPartition, None] = {}
        self._produce: dict[TopicPartition, None] = {}
        self._scheduled = False
        self.closed = False
        self.flushes = 0

    def note(self, tp: TopicPartition, produce: bool = False) -> None:
        """`tp` changed; `produce`: also re-check acks=-1 produces waiting on it. Nothing is
        scheduled when nothing can be waiting (no parked operation, no session holding
        `tp`, no operation watching it): what parks later in this turn reads the partition as it
        is by then."""
        if not self.fetch_purgatory.watches(tp) and not (
                produce and self.produce_purgatory.watches(tp)):
            cache = self.sessions()
            if cache is None or not cache.holds(tp):
                return
        self._fetch[tp] = None
        if produce:
            self._produce[tp] = None
        if not self._scheduled:
            self._scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop: synchronous caller
                self.flush()

    def flush(self) -> None:
        """Run the noted wakeups now (also what the scheduled callback does)."""
        if self.closed:
            self._fetch.clear()
            self._produce.clear()
            self._scheduled = False
            return
        self.flushes += 1
        self._scheduled = True  # notes made by the completions below join this flush
        try:
            while self._fetch or self._produce:
                fetch, self._fetch = self._fetch, {}
                produce, self._produce = self._produce, {}
                if fetch:
                    self._wake_fetches(fetch)
                if produce and self.produce_purgatory.num_keys:
                    _check_each(self.produce_purgatory, produce)
        finally:
            self._scheduled = False

    def _wake_fetches(self, tps) -> None:
        purgatory = self.fetch_purgatory
        cache = self.sessions()
        if cache is not None and cache.sessions:
            woken = {}
            for tp in tps:
                for session in cache.partition_changed(tp):
                    woken[session.id] = None
            for sid in woken:
                purgatory.check_and_complete(FetchSessionKey(sid))
        if purgatory.num_keys:
            _check_each(purgatory, tps)


#: Above this many partitions in one flush, each parked operation is tried once for all of
#: them (`check_and_complete_many`) rather than once per partition it watches: a
#: LeaderAndIsr changing 100,000 partitions would otherwise try a follower fetch parked on
#: all of them 100,000 times (issue 22).
MANY = 32


def _check_each(purgatory, tps) -> None:
    if len(tps) > MANY:
        purgatory.check_and_complete_many([TopicPartitionKey(*tp) for tp in tps])
        return
    check = purgatory.check_and_complete
    for tp in tps:
        check(TopicPartitionKey(*tp))
