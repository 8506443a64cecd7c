"""Dead-letter intents: committed with the archive, numbered without gaps, exactly once across failover."""

from __future__ import annotations

from coordinator.share.config import SharePartitionConfig
from coordinator.share.state import DeadLetterIntent, DeadLetterReason
from protocol.errors import ErrorCode
from tests.unit.coordinator.share.share_helpers import ShareHarness, ack, batches

ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0
LOCK = 30_000
DLQ = SharePartitionConfig(dead_letter_topic="dlq.orders", delivery_count_limit=2)
REJ = DeadLetterReason.REJECTED
LIMIT = DeadLetterReason.DELIVERY_COUNT_LIMIT


def persisted(h):
    shard = h.coordinator.shard
    return shard.state(shard.keys()[0])


async def test_reject_creates_an_intent_in_the_same_write_as_the_archive():
    h = ShareHarness(DLQ)
    sp = await h.load()
    sp.acquire("m1", batches(0, 4), 100)
    assert await sp.acknowledge("m1", [ack(1, 4, REJECT, ACCEPT, GAP, REJECT)]) == ErrorCode.NONE
    expected = [DeadLetterIntent(0, 1, 1, REJ), DeadLetterIntent(1, 4, 1, REJ)]
    assert h.listener.dead_letters == expected
    assert sp.pending_dead_letters() == expected
    # One write carried both the ARCHIVED states and the intents.
    write = h.persister.writes[-1]
    assert write.dead_letters_added == tuple(expected)
    assert [(b.first_offset, b.last_offset, b.delivery_state) for b in write.state_batches] \
        == [(1, 1, 4), (2, 2, 2), (3, 4, 4)]
    state = persisted(h)
    assert state.dead_letters == tuple(expected) and state.next_dead_letter_sequence == 2


async def test_without_a_dlq_topic_nothing_is_dead_lettered():
    h = ShareHarness(SharePartitionConfig(delivery_count_limit=2))
    sp = await h.load()
    sp.acquire("m1", batches(0, 1), 100)
    assert await sp.acknowledge("m1", [ack(0, 1, REJECT)]) == ErrorCode.NONE
    assert h.listener.dead_letters == [] and sp.pending_dead_letters() == []


async def test_delivery_count_limit_dead_letters_on_release_and_on_expiry():
    h = ShareHarness(DLQ)
    sp = await h.load()
    sp.acquire("m1", batches(0, 1), 100)
    assert await sp.acknowledge("m1", [ack(0, 1, RELEASE)]) == ErrorCode.NONE
    sp.acquire("m1", batches(0, 1), 100)
    assert await sp.acknowledge("m1", [ack(0, 0, RELEASE)]) == ErrorCode.NONE
    await h.advance(LOCK, sp)
    assert h.listener.dead_letters == [DeadLetterIntent(0, 0, 2, LIMIT), DeadLetterIntent(1, 1, 2, LIMIT)]
    assert persisted(h).next_dead_letter_sequence == 2


async def test_failed_write_consumes_no_sequence_and_archives_nothing():
    h = ShareHarness(DLQ)
    sp = await h.load()
    sp.acquire("m1", batches(0, 1), 100)
    h.persister.fail_next()
    assert await sp.acknowledge("m1", [ack(0, 0, REJECT)]) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.listener.dead_letters == []
    assert await sp.acknowledge("m1", [ack(1, 1, REJECT)]) == ErrorCode.NONE
    assert h.listener.dead_letters == [DeadLetterIntent(0, 1, 1, REJ)]


async def test_completion_removes_intents_durably():
    h = ShareHarness(DLQ)
    sp = await h.load()
    sp.acquire("m1", batches(0, 2), 100)
    assert await sp.acknowledge("m1", [ack(0, 2, REJECT)]) == ErrorCode.NONE
    assert await sp.set_dead_letter_producer(4000, 0) == ErrorCode.NONE
    assert await sp.complete_dead_letters([0, 2]) == ErrorCode.NONE
    assert [i.sequence for i in sp.pending_dead_letters()] == [1]
    state = persisted(h)
    assert [i.sequence for i in state.dead_letters] == [1]
    assert state.dead_letter_producer == (4000, 0)
    # Completing unknown or already-completed sequences is a no-op.
    writes = len(h.persister.writes)
    assert await sp.complete_dead_letters([0, 7]) == ErrorCode.NONE
    assert len(h.persister.writes) == writes


async def test_failover_redelivers_pending_intents_with_the_same_sequences_once():
    h = ShareHarness(DLQ, updates_per_snapshot=2)
    sp = await h.load()
    sp.acquire("m1", batches(0, 5), 100)
    assert await sp.acknowledge("m1", [ack(0, 5, ACCEPT, REJECT, ACCEPT, REJECT, ACCEPT, REJECT)]) \
        == ErrorCode.NONE
    assert await sp.set_dead_letter_producer(77, 3) == ErrorCode.NONE
    assert await sp.complete_dead_letters([0]) == ErrorCode.NONE   # the DLQ writer did #0 only
    first_round = list(h.listener.dead_letters)
    h.listener.dead_letters.clear()
    sp2 = await h.failover(sp)
    # The new leader hands exactly the unconfirmed intents to its DLQ writer, same numbers,
    # with the same idempotent producer: the DLQ partition deduplicates a re-send.
    assert h.listener.dead_letters == first_round[1:]
    assert sp2.dead_letter_producer == (77, 3)
    # The archived records stay archived: nothing below the SPSO comes back.
    assert sp2.start_offset == 6
    assert sp2.acquire("m2", batches(0, 5), 100) == []
    # New intents continue the numbering without a gap or a reuse.
    sp2.acquire("m2", batches(6, 6), 100)
    assert await sp2.acknowledge("m2", [ack(6, 6, REJECT)]) == ErrorCode.NONE
    assert h.listener.dead_letters[-1] == DeadLetterIntent(3, 6, 1, REJ)
    assert await sp2.complete_dead_letters([1, 2, 3]) == ErrorCode.NONE
    h.listener.dead_letters.clear()
    sp3 = await h.failover(sp2)
    assert h.listener.dead_letters == [] and sp3.pending_dead_letters() == []


async def test_unpersisted_reject_is_redelivered_after_failover_not_dead_lettered():
    h = ShareHarness(DLQ)
    sp = await h.load()
    sp.acquire("m1", batches(0, 0), 100)
    h.persister.fail_next()
    assert await sp.acknowledge("m1", [ack(0, 0, REJECT)]) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    sp2 = await h.failover(sp)
    assert h.listener.dead_letters == []
    got = sp2.acquire("m2", batches(0, 0), 100)
    assert [(a.first_offset, a.last_offset) for a in got] == [(0, 0)]


async def test_expiry_dead_letters_survive_failover_once_flushed():
    h = ShareHarness(DLQ)
    sp = await h.load()
    for _ in range(2):
        sp.acquire("m1", batches(0, 0), 100)
        await h.advance(LOCK, sp)
    assert [i.offset for i in h.listener.dead_letters] == [0]
    h.listener.dead_letters.clear()
    sp2 = await h.failover(sp)
    assert h.listener.dead_letters == [DeadLetterIntent(0, 0, 2, LIMIT)]
    assert sp2.start_offset == 1


async def test_expiry_dead_letter_not_yet_persisted_is_not_lost_across_failover():
    h = ShareHarness(DLQ)
    sp = await h.load()
    sp.acquire("m1", batches(0, 0), 100)
    await h.advance(LOCK, sp)
    sp.acquire("m1", batches(0, 0), 100)
    h.persister.fail_next()
    await h.advance(LOCK, sp)  # archived in memory, the write with its intent failed
    assert h.listener.dead_letters == []
    assert sp.start_offset == 1 and len(sp.cache) == 0  # archived in memory
    sp2 = await h.failover(sp)
    # Not persisted: the new leader still has the record Available (delivery count 1),
    # delivers it, and dead-letters it when the limit is reached there - once.
    got = sp2.acquire("m2", batches(0, 0), 100)
    assert [a.delivery_count for a in got] == [2]
    await h.advance(LOCK, sp2)
    assert h.listener.dead_letters == [DeadLetterIntent(0, 0, 2, LIMIT)]
