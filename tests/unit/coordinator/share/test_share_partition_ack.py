"""SharePartition: acquisition, acknowledgement types, SPSO/SPEO movement, error codes."""

from __future__ import annotations

from coordinator.share.config import SharePartitionConfig
from coordinator.share.state import AcquiredRecords, RecordState
from protocol.errors import ErrorCode
from tests.unit.coordinator.share.share_helpers import ShareHarness, ack, batches

ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


def states(sp, first, last):
    out = []
    for off in range(first, last + 1):
        b = sp.cache.overlapping(off, off)
        out.append(b[0].state_at(off).state if b else None)
    return out


async def test_first_acquire_takes_new_records_with_delivery_count_one():
    h = ShareHarness()
    sp = await h.load()
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (0, 0, 0)
    got = sp.acquire("m1", batches(0, 9), max_records=100)
    assert got == [AcquiredRecords(0, 9, 1)]
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (0, 10, 10)
    assert sp.stats().acquired == 10
    # Nothing more to acquire in that range: a second member gets nothing from it.
    assert sp.acquire("m2", batches(0, 9), max_records=100) == []


async def test_accept_moves_spso_and_empties_the_cache():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    assert await sp.acknowledge("m1", [ack(0, 9, ACCEPT)]) == ErrorCode.NONE
    assert (sp.start_offset, sp.end_offset) == (10, 10)
    assert len(sp.cache) == 0
    # The write reached the coordinator: SPSO 10 is durable.
    assert h.coordinator.shard.state(h.coordinator.shard.keys()[0]).start_offset == 10


async def test_partial_ack_splits_batch_and_spso_stops_at_first_open_record():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9, size=10), 100)
    assert await sp.acknowledge("m1", [ack(0, 3, ACCEPT), ack(5, 6, REJECT)]) == ErrorCode.NONE
    assert sp.start_offset == 4
    assert states(sp, 4, 7) == [RecordState.ACQUIRED, RecordState.ARCHIVED, RecordState.ARCHIVED,
                                RecordState.ACQUIRED]
    assert await sp.acknowledge("m1", [ack(4, 4, ACCEPT), ack(7, 9, ACCEPT)]) == ErrorCode.NONE
    assert (sp.start_offset, len(sp.cache)) == (10, 0)


async def test_per_offset_types_in_one_batch():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 4), 100)
    code = await sp.acknowledge("m1", [ack(0, 4, ACCEPT, RELEASE, REJECT, GAP, ACCEPT)])
    assert code == ErrorCode.NONE
    assert sp.start_offset == 1
    assert states(sp, 1, 4) == [RecordState.AVAILABLE, RecordState.ARCHIVED, RecordState.ARCHIVED,
                                RecordState.ACKNOWLEDGED]
    assert sp.next_fetch_offset() == 1
    # The released record is re-acquired with delivery count 2; the others are not handed out.
    assert sp.acquire("m2", batches(0, 4), 100) == [AcquiredRecords(1, 1, 2)]


async def test_release_makes_records_available_again_with_count_plus_one():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    assert await sp.acknowledge("m1", [ack(0, 9, RELEASE)]) == ErrorCode.NONE
    assert h.listener.available == 1
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("m2", batches(0, 9), 100) == [AcquiredRecords(0, 9, 2)]


async def test_wrong_member_or_unacquired_offsets_are_invalid_record_state_and_change_nothing():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    assert await sp.acknowledge("m2", [ack(0, 4, ACCEPT)]) == ErrorCode.INVALID_RECORD_STATE
    # Past SPEO: never fetched.
    assert await sp.acknowledge("m1", [ack(8, 12, ACCEPT)]) == ErrorCode.INVALID_RECORD_STATE
    # All or nothing: the valid first batch is not applied when the second is invalid.
    code = await sp.acknowledge("m1", [ack(0, 1, ACCEPT), ack(5, 6, ACCEPT)])
    assert code == ErrorCode.NONE
    code = await sp.acknowledge("m1", [ack(2, 3, ACCEPT), ack(5, 6, ACCEPT)])
    assert code == ErrorCode.INVALID_RECORD_STATE
    assert states(sp, 2, 3) == [RecordState.ACQUIRED, RecordState.ACQUIRED]
    assert sp.start_offset == 2
    assert not any(st.pending for b in sp.cache for _, _, st in b.all_states())


async def test_malformed_acknowledgements_are_invalid_request():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    for bad in ([ack(0, 4, 7)], [ack(4, 0, ACCEPT)], [ack(0, 4, ACCEPT, ACCEPT)],
                [ack(0, 4, ACCEPT), ack(3, 6, ACCEPT)], [ack(5, 6, ACCEPT), ack(0, 1, ACCEPT)]):
        assert await sp.acknowledge("m1", bad) == ErrorCode.INVALID_REQUEST, bad
    assert sp.stats().acquired == 10


async def test_offsets_below_spso_are_ignored():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    assert await sp.acknowledge("m1", [ack(0, 4, ACCEPT)]) == ErrorCode.NONE
    assert await sp.acknowledge("m1", [ack(0, 2, ACCEPT)]) == ErrorCode.NONE
    assert await sp.acknowledge("m1", [ack(0, 9, ACCEPT)]) == ErrorCode.NONE
    assert sp.start_offset == 10


async def test_max_records_is_soft_and_rounds_up_to_the_fetched_batch():
    h = ShareHarness()
    sp = await h.load()
    got = sp.acquire("m1", batches(0, 19, size=5), max_records=7)
    assert got == [AcquiredRecords(0, 9, 1)]
    assert sp.end_offset == 10
    got = sp.acquire("m2", batches(10, 19, size=5), max_records=1)
    assert got == [AcquiredRecords(10, 14, 1)]


async def test_batch_size_cuts_new_runs():
    h = ShareHarness()
    sp = await h.load()
    got = sp.acquire("m1", batches(0, 9, size=10), max_records=100, batch_size=4)
    assert got == [AcquiredRecords(0, 3, 1), AcquiredRecords(4, 7, 1), AcquiredRecords(8, 9, 1)]
    assert len(sp.cache) == 3


async def test_max_record_locks_caps_the_in_flight_window():
    h = ShareHarness(SharePartitionConfig(max_record_locks=8))
    sp = await h.load()
    got = sp.acquire("m1", batches(0, 19, size=5), max_records=100)
    assert got == [AcquiredRecords(0, 7, 1)]  # hard cap, even inside a fetched batch
    assert not sp.can_acquire()
    assert sp.acquire("m2", batches(8, 19), 100) == []
    # Acknowledging the head frees room: the window slides with the SPSO.
    assert await sp.acknowledge("m1", [ack(0, 2, ACCEPT)]) == ErrorCode.NONE
    assert sp.can_acquire()
    assert sp.acquire("m2", batches(8, 19), 100) == [AcquiredRecords(8, 10, 1)]
    # Released records inside the window can always be re-acquired.
    assert await sp.acknowledge("m1", [ack(3, 7, RELEASE)]) == ErrorCode.NONE
    assert sp.can_acquire()
    assert sp.acquire("m3", batches(0, 19), 100) == [AcquiredRecords(3, 7, 2)]


async def test_fetch_starting_past_speo_archives_the_gap():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 4), 100)
    # Offsets 5..9 were compacted away: the log returns 10.. for a read from 5.
    assert sp.acquire("m1", batches(10, 14), 100) == [AcquiredRecords(10, 14, 1)]
    assert states(sp, 5, 9) == [RecordState.ARCHIVED] * 5
    assert await sp.acknowledge("m1", [ack(0, 4, ACCEPT)]) == ErrorCode.NONE
    assert sp.start_offset == 10


async def test_empty_share_partition_jumps_to_the_first_fetched_offset():
    h = ShareHarness()
    sp = await h.load()
    assert sp.acquire("m1", batches(50, 54), 100) == [AcquiredRecords(50, 54, 1)]
    assert (sp.start_offset, sp.end_offset) == (50, 55)


async def test_release_acquired_records_of_a_departed_member():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 4), 100)
    sp.acquire("m2", batches(5, 9), 100)
    assert await sp.release_acquired_records("m1") == ErrorCode.NONE
    assert states(sp, 0, 9) == [RecordState.AVAILABLE] * 5 + [RecordState.ACQUIRED] * 5
    assert sp.next_fetch_offset() == 0


async def test_persister_failure_rolls_back_an_acknowledgement():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    h.persister.fail_next(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert await sp.acknowledge("m1", [ack(0, 9, ACCEPT)]) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert sp.start_offset == 0 and sp.stats().acquired == 10
    # The member may retry; the retry lands.
    assert await sp.acknowledge("m1", [ack(0, 9, ACCEPT)]) == ErrorCode.NONE
    assert sp.start_offset == 10


async def test_fenced_leader_epoch_fences_the_partition():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    h.persister.fail_next(ErrorCode.FENCED_LEADER_EPOCH)
    assert await sp.acknowledge("m1", [ack(0, 9, ACCEPT)]) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert sp.fenced == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert sp.acquire("m1", batches(10, 19), 100) == []
    assert await sp.acknowledge("m1", [ack(0, 9, ACCEPT)]) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert h.mock_timer.size == 0  # lock timers cancelled


async def test_log_start_offset_moving_past_spso_archives_available_records():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    assert await sp.acknowledge("m1", [ack(0, 4, RELEASE)]) == ErrorCode.NONE
    sp.update_log_start_offset(3)
    assert sp.start_offset == 3
    assert sp.next_fetch_offset() == 3
    sp.update_log_start_offset(20)
    assert (sp.start_offset, sp.end_offset, len(sp.cache)) == (20, 20, 0)
