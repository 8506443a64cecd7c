"""SharePartition on a manual clock: acquisition-lock expiry, delivery-count limit, redelivery backoff."""

from __future__ import annotations

import asyncio

from coordinator.share.config import SharePartitionConfig
from coordinator.share.share_partition import WRITE_RETRY_BACKOFF_MS
from coordinator.share.state import AcquiredRecords, RecordState
from protocol.errors import ErrorCode
from tests.unit.coordinator.share.share_helpers import ShareHarness, ack, batches

ACCEPT, RELEASE, REJECT = 1, 2, 3
LOCK = 30_000


def state(sp, off):
    return sp.cache.overlapping(off, off)[0].state_at(off)


def persisted(h):
    shard = h.coordinator.shard
    return shard.state(shard.keys()[0])


async def test_lock_expires_exactly_at_the_lock_duration():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 4), 100)
    await h.advance(LOCK - 1, sp)
    assert state(sp, 0).state is RecordState.ACQUIRED
    notified = h.listener.available
    await h.advance(1, sp)
    assert state(sp, 0).state is RecordState.AVAILABLE
    assert h.listener.available == notified + 1
    assert sp.next_fetch_offset() == 0
    # The expiry is persisted: Available with delivery count 1.
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in persisted(h).state_batches] == [(0, 4, 0, 1)]
    # Too late to acknowledge; another member gets the records with delivery count 2.
    assert await sp.acknowledge("m1", [ack(0, 4, ACCEPT)]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acquire("m2", batches(0, 4), 100) == [AcquiredRecords(0, 4, 2)]
    assert h.mock_timer.size == 1  # one wheel entry for m2's lock, the old one is gone


async def test_acknowledged_part_of_a_batch_does_not_expire():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9, size=10), 100)
    assert await sp.acknowledge("m1", [ack(0, 4, ACCEPT)]) == ErrorCode.NONE
    assert h.mock_timer.size == 1  # the batch lock still covers 5..9
    await h.advance(LOCK, sp)
    assert [state(sp, o).state for o in range(5, 10)] == [RecordState.AVAILABLE] * 5
    assert sp.start_offset == 5
    assert h.mock_timer.size == 0


async def test_fully_acknowledged_lock_is_cancelled():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9, size=10), 100)
    assert await sp.acknowledge("m1", [ack(0, 4, ACCEPT), ack(5, 9, REJECT)]) == ErrorCode.NONE
    assert h.mock_timer.size == 0


class GatedPersister:
    """Holds writes until released, to interleave timer expiry with a pending write."""

    def __init__(self, inner):
        self.inner = inner
        self.gate = asyncio.Event()
        self.result = None

    async def read_state(self, request):
        return await self.inner.read_state(request)

    async def write_state(self, request):
        await self.gate.wait()
        if self.result is not None:
            return self.result
        return await self.inner.write_state(request)


async def _pending_ack(h, sp, gated, fail: bool):
    sp._persister = gated
    gated.result = ErrorCode.COORDINATOR_NOT_AVAILABLE if fail else None
    task = asyncio.create_task(sp.acknowledge("m1", [ack(0, 4, ACCEPT)]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert state(sp, 0).pending
    h.mock_timer.advance(LOCK)  # the lock expires while the write is in flight
    assert state(sp, 0).state is RecordState.ACQUIRED  # left alone while pending
    gated.gate.set()
    return await task


async def test_lock_expiring_during_a_successful_ack_write_does_not_undo_it():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 4), 100)
    gated = GatedPersister(h.persister)
    assert await _pending_ack(h, sp, gated, fail=False) == ErrorCode.NONE
    await sp.drain()
    assert sp.start_offset == 5 and len(sp.cache) == 0


async def test_lock_expiring_during_a_failed_ack_write_releases_afterwards():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 4), 100)
    gated = GatedPersister(h.persister)
    assert await _pending_ack(h, sp, gated, fail=True) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert state(sp, 0).state is RecordState.AVAILABLE
    await sp.drain()  # the expiry write went to the same (failing) coordinator
    sp._persister = h.persister
    await h.advance(WRITE_RETRY_BACKOFF_MS, sp)
    assert persisted(h).state_batches[0].delivery_count == 1


async def test_delivery_count_limit_archives_on_release_and_on_expiry():
    h = ShareHarness(SharePartitionConfig(delivery_count_limit=3))
    sp = await h.load()
    for n in (1, 2):
        assert sp.acquire("m1", batches(0, 1), 100) == [AcquiredRecords(0, 1, n)]
        assert await sp.acknowledge("m1", [ack(0, 1, RELEASE)]) == ErrorCode.NONE
    assert sp.acquire("m1", batches(0, 1), 100) == [AcquiredRecords(0, 1, 3)]
    assert await sp.acknowledge("m1", [ack(0, 0, RELEASE)]) == ErrorCode.NONE
    assert state(sp, 0).state is RecordState.ARCHIVED
    await h.advance(LOCK, sp)  # offset 1 reaches the limit by expiry
    assert sp.start_offset == 2 and len(sp.cache) == 0
    assert sp.acquire("m2", batches(0, 1), 100) == []
    assert persisted(h).start_offset == 2


async def test_redelivery_backoff_delays_availability_exponentially():
    cfg = SharePartitionConfig(redelivery_backoff_ms=1000, redelivery_backoff_max_ms=3000,
                               delivery_count_limit=10)
    h = ShareHarness(cfg)
    sp = await h.load()
    expected_delays = [1000, 2000, 3000, 3000]
    for n, delay in enumerate(expected_delays, start=1):
        assert sp.acquire("m1", batches(0, 4), 100) == [AcquiredRecords(0, 4, n)]
        assert await sp.acknowledge("m1", [ack(0, 4, RELEASE)]) == ErrorCode.NONE
        assert state(sp, 0).state is RecordState.DELAYED
        assert sp.next_fetch_offset() == 5
        assert sp.acquire("m2", batches(0, 4), 100) == []
        assert h.mock_timer.size == 1  # one wheel entry for the whole release, no scan
        await h.advance(delay - 1, sp)
        assert state(sp, 0).state is RecordState.DELAYED
        notified = h.listener.available
        await h.advance(1, sp)
        assert state(sp, 0).state is RecordState.AVAILABLE
        assert h.listener.available == notified + 1
        assert sp.next_fetch_offset() == 0
    # Delayed records are persisted as Available with their delivery count.
    assert persisted(h).state_batches[0].delivery_state == 0


async def test_backoff_also_applies_to_lock_expiry_and_delayed_records_cannot_be_acked():
    h = ShareHarness(SharePartitionConfig(redelivery_backoff_ms=500))
    sp = await h.load()
    sp.acquire("m1", batches(0, 0), 100)
    await h.advance(LOCK, sp)
    assert state(sp, 0).state is RecordState.DELAYED
    assert await sp.acknowledge("m1", [ack(0, 0, ACCEPT)]) == ErrorCode.INVALID_RECORD_STATE
    await h.advance(500, sp)
    assert sp.acquire("m2", batches(0, 0), 100) == [AcquiredRecords(0, 0, 2)]


async def test_expiry_write_failures_are_retried_until_persisted():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 4), 100)
    h.persister.fail_next(ErrorCode.COORDINATOR_NOT_AVAILABLE, times=2)
    await h.advance(LOCK, sp)
    # Applied in memory at once (as Kafka), even though the write failed.
    assert state(sp, 0).state is RecordState.AVAILABLE
    assert not persisted(h).state_batches
    await h.advance(WRITE_RETRY_BACKOFF_MS, sp)  # second failure
    assert not persisted(h).state_batches
    await h.advance(WRITE_RETRY_BACKOFF_MS, sp)
    assert persisted(h).state_batches[0].delivery_count == 1


async def test_member_departure_releases_with_backoff_and_limit():
    h = ShareHarness(SharePartitionConfig(redelivery_backoff_ms=100, delivery_count_limit=2))
    sp = await h.load()
    sp.acquire("m1", batches(0, 1), 100)
    assert await sp.release_acquired_records("m1") == ErrorCode.NONE
    assert state(sp, 0).state is RecordState.DELAYED
    await h.advance(100, sp)
    sp.acquire("m1", batches(0, 1), 100)
    assert await sp.release_acquired_records("m1") == ErrorCode.NONE
    assert sp.start_offset == 2  # second delivery reached the limit: archived
