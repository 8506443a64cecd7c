"""share.isolation.level: read_committed stops at the LSO and never delivers aborted data."""

from __future__ import annotations

from coordinator.share.config import SharePartitionConfig
from coordinator.share.state import AbortedTransaction, AcquiredRecords, FetchedBatch, RecordState
from protocol.errors import ErrorCode
from tests.unit.coordinator.share.share_helpers import ShareHarness, ack

ACCEPT = 1
RC = SharePartitionConfig(isolation_level="read_committed")

# 0-4 plain; 5-7 txn of producer 7 (aborted by the marker at 10); 8-9 txn of 8 (committed at
# 11); 12-14 a later txn of 7, still open (LSO = 12).
LOG = [
    FetchedBatch(0, 4),
    FetchedBatch(5, 7, producer_id=7, is_transactional=True),
    FetchedBatch(8, 9, producer_id=8, is_transactional=True),
    FetchedBatch(10, 10, producer_id=7, is_transactional=True, is_control=True),
    FetchedBatch(11, 11, producer_id=8, is_transactional=True, is_control=True),
    FetchedBatch(12, 14, producer_id=7, is_transactional=True),
]
ABORTED = [AbortedTransaction(7, 5)]


def state(sp, off):
    return sp.cache.overlapping(off, off)[0].state_at(off).state


async def test_read_committed_skips_aborted_and_control_and_stops_at_the_lso():
    h = ShareHarness(RC)
    sp = await h.load()
    got = sp.acquire("m1", LOG, 100, last_stable_offset=12, aborted_transactions=ABORTED)
    assert got == [AcquiredRecords(0, 4, 1), AcquiredRecords(8, 9, 1)]
    assert sp.end_offset == 12
    assert [state(sp, o) for o in (5, 6, 7, 10, 11)] == [RecordState.ARCHIVED] * 5
    assert await sp.acknowledge("m1", [ack(0, 4, ACCEPT), ack(8, 9, ACCEPT)]) == ErrorCode.NONE
    assert sp.start_offset == 12
    # Once the open transaction commits, the LSO moves and the records are delivered.
    more = LOG[5:] + [FetchedBatch(15, 15, producer_id=7, is_transactional=True, is_control=True)]
    got = sp.acquire("m1", more, 100, last_stable_offset=16)
    assert got == [AcquiredRecords(12, 14, 1)]


async def test_read_uncommitted_delivers_aborted_data_but_not_markers():
    h = ShareHarness()
    sp = await h.load()
    got = sp.acquire("m1", LOG, 100, last_stable_offset=12, aborted_transactions=ABORTED)
    assert got == [AcquiredRecords(0, 9, 1), AcquiredRecords(12, 14, 1)]
    assert [state(sp, o) for o in (10, 11)] == [RecordState.ARCHIVED] * 2


async def test_available_records_of_aborted_transactions_are_archived_on_reacquisition():
    # Delivered and released under read_uncommitted, then the group switches to
    # read_committed (the new leader loads with the new config): the persisted Available
    # records of the aborted transaction are archived, not delivered again.
    h = ShareHarness()
    sp = await h.load()
    assert sp.acquire("m1", LOG[:3], 100) == [AcquiredRecords(0, 9, 1)]
    assert await sp.acknowledge("m1", [ack(0, 9, 2)]) == ErrorCode.NONE
    sp2 = await h.failover(sp, config=RC)
    got = sp2.acquire("m2", LOG, 100, last_stable_offset=12, aborted_transactions=ABORTED)
    assert got == [AcquiredRecords(0, 4, 2), AcquiredRecords(8, 9, 2)]
    assert [state(sp2, o) for o in (5, 6, 7)] == [RecordState.ARCHIVED] * 3
