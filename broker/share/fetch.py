"""Fetching for share consumers: read, acquire, answer or wait (Kafka's SharePartitionManager
.fetchMessages + DelayedShareFetch + ShareFetchUtils).

`ShareFetcher.fetch(group, member, partitions, params)` runs one ShareFetch's fetch part:

1. For each share-partition of the session, in a rotating order (so no partition starves):
   load it (`SharePartitionManager.partition`); if it can acquire, read the log from
   `next_fetch_offset()` up to the high watermark (the LSO under `share.isolation.level=
   read_committed`, with the aborted transactions), at most `PARTITION_MAX_BYTES` (whole
   first batch at least), file bytes read off the event loop; hand the batch headers to
   `SharePartition.acquire` with what is left of `max_records`.
2. The answer per partition is the RecordBatches that hold acquired offsets (whole batches,
   as Kafka sends them; the client keeps only the acquired offsets) and the
   `AcquiredRecords` ranges with their delivery counts.
3. When nothing was acquired anywhere, no partition failed and `max_wait_ms` > 0, a
   `DelayedShareFetch` is parked in the fetch purgatory, watching each partition's
   `TopicPartitionKey` (appends and high watermark moves wake it, and so do released,
   expired or backed-off records via `SharePartitionManager.on_wake`); when woken it fetches
   again, and at the deadline it answers with whatever it finds (possibly nothing).

Errors per partition: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID,
KAFKA_STORAGE_ERROR, and the load errors of `load_share_partition` (COORDINATOR_NOT_AVAILABLE,
FENCED_STATE_EPOCH, ...).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

from broker.partition import READ_COMMITTED, READ_UNCOMMITTED
from broker.purgatory import DelayedOperation, TopicPartitionKey
from coordinator.share.share_partition import SharePartition
from coordinator.share.state import AbortedTransaction, AcquiredRecords, FetchedBatch
from protocol.errors import ErrorCode, KafkaError
from protocol.records import iter_batches_lenient

__all__ = ["PARTITION_MAX_BYTES", "PartitionResult", "ShareFetchParams", "ShareFetcher"]

log = logging.getLogger(__name__)
E = ErrorCode
#: bytes read from one partition's log per fetch (a whole first batch is always read)
PARTITION_MAX_BYTES = 1 << 20


@dataclass(slots=True)
class ShareFetchParams:
    max_wait_ms: int = 0
    min_bytes: int = 1
    max_bytes: int = 0x7FFFFFFF
    max_records: int = 500
    batch_size: int = 500


@dataclass(slots=True)
class PartitionResult:
    error: ErrorCode = E.NONE
    records: bytes = b""
    acquired: list[AcquiredRecords] = field(default_factory=list)
    leader_epoch: int = -1


class DelayedShareFetch(DelayedOperation):
    """A ShareFetch that acquired nothing, waiting up to max_wait_ms.

    try_complete completes when one of these holds:
    Case A: a partition is no longer led here (or was deleted) -> the fetch runs again and
            answers that partition's error.
    Case B: a share-partition has Available records below its SPEO, or the log (its high
            watermark, the LSO under read_committed) is past the SPEO while the lock window
            has room -> the fetch runs again and acquires.
    (Case C, the deadline, is `on_expiration`: the fetch runs once more and answers.)
    The re-run happens in the awaiting coroutine; this operation only resolves `future`.
    """

    def __init__(self, delay_ms: int, checks: list, future: asyncio.Future) -> None:
        super().__init__(delay_ms)
        self.checks = checks  # [(Partition, SharePartition)]
        self.future = future

    def try_complete(self) -> bool:
        for part, sp in self.checks:
            if not part.is_leader or part.deleted or sp.fenced is not None:
                return self.force_complete()
            if not sp.can_acquire():
                continue
            if sp.next_fetch_offset() < sp.end_offset:
                return self.force_complete()
            limit = part.last_stable_offset if sp.config.read_committed \
                else part.log.high_watermark
            if limit > sp.end_offset:
                return self.force_complete()
        return False

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


class ShareFetcher:
    """See the module docstring. `manager` is the SharePartitionManager."""

    def __init__(self, manager, purgatory) -> None:
        self.manager = manager
        self.purgatory = purgatory  # the ReplicaManager's fetch purgatory
        self._rotation = 0
        self.parked = 0

    async def fetch(self, group_id: str, member_id: str,
                    partitions: list[tuple[uuid.UUID, int]], params: ShareFetchParams,
                    refresh: bool = False) -> dict[tuple[uuid.UUID, int], PartitionResult]:
        """`refresh`: the session was just opened (`SharePartitionManager.partition`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(params.max_wait_ms, 0) / 1000
        while True:
            results, checks = await self._fetch_once(group_id, member_id, partitions, params,
                                                     refresh)
            refresh = False
            done = any(r.acquired or r.error != E.NONE for r in results.values())
            remaining_ms = int((deadline - loop.time()) * 1000)
            if done or remaining_ms <= 0 or not checks or not self.manager.active:
                return results
            future = loop.create_future()
            op = DelayedShareFetch(remaining_ms, checks, future)
            keys = [TopicPartitionKey(part.topic, part.partition) for part, _ in checks]
            self.parked += 1
            self.purgatory.try_complete_else_watch(op, keys)
            await future
            if loop.time() >= deadline:
                results, _ = await self._fetch_once(group_id, member_id, partitions, params)
                return results

    async def _fetch_once(self, group_id, member_id, partitions, params, refresh=False):
        results: dict[tuple[uuid.UUID, int], PartitionResult] = {}
        checks = []
        n = len(partitions)
        if not n:
            return results, checks
        start = self._rotation % n
        self._rotation += 1
        budget = [max(params.max_records, 1), max(params.max_bytes, 1)]
        for i in range(n):
            tp = partitions[(start + i) % n]
            results[tp] = r = PartitionResult()
            sp = await self.manager.partition(group_id, *tp, refresh=refresh)
            if isinstance(sp, ErrorCode):
                r.error = sp
                continue
            try:
                _, part = self.manager.topic_partition(*tp)
            except KafkaError as e:
                r.error = e.code
                continue
            r.leader_epoch = part.leader_epoch
            checks.append((part, sp))
            if budget[0] <= 0 or budget[1] <= 0 or not sp.can_acquire():
                continue
            try:
                await self._acquire(part, sp, member_id, params, budget, r)
            except KafkaError as e:
                r.error = e.code
            except OSError as e:
                log.warning("share fetch read of %s-%d failed: %r", part.topic, part.partition, e)
                r.error = E.KAFKA_STORAGE_ERROR
        return {tp: results[tp] for tp in partitions}, checks

    async def _acquire(self, part, sp: SharePartition, member_id: str, params, budget,
                       r: PartitionResult) -> None:
        offset = sp.next_fetch_offset()
        committed = sp.config.read_committed
        info = part.read_records(offset, min(PARTITION_MAX_BYTES, budget[1]),
                                 isolation_level=READ_COMMITTED if committed
                                 else READ_UNCOMMITTED)
        if not info.records:
            return
        data = await asyncio.get_running_loop().run_in_executor(None, info.records.read_bytes)
        batches: list[tuple[FetchedBatch, int, int]] = []
        pos = 0
        for b in iter_batches_lenient(data):  # consecutive batches from byte 0
            size = b.size_in_bytes
            batches.append((FetchedBatch(b.base_offset, b.last_offset, b.producer_id,
                                         b.is_transactional, b.is_control), pos, pos + size))
            pos += size
        if not batches:
            return
        aborted = [AbortedTransaction(pid, first) for pid, first in
                   info.aborted_transactions or ()]
        acquired = sp.acquire(member_id, [b for b, _, _ in batches], budget[0],
                              batch_size=params.batch_size or None,
                              last_stable_offset=info.last_stable_offset if committed else None,
                              aborted_transactions=aborted)
        if not acquired:
            return
        r.acquired = acquired
        budget[0] -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
        # only the batches holding acquired offsets go back
        lo = min(a.first_offset for a in acquired)
        hi = max(a.last_offset for a in acquired)
        spans = [(s, e) for b, s, e in batches if b.last_offset >= lo and b.base_offset <= hi]
        r.records = bytes(memoryview(data)[spans[0][0]:spans[-1][1]]) if spans else b""
        budget[1] -= len(r.records)
