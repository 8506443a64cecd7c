"""Leader changes: state rebuilt from the persisted snapshot + updates; auto offset reset; fencing."""

from __future__ import annotations

import random

from coordinator.share.config import SharePartitionConfig, parse_auto_offset_reset
from coordinator.share.load import LogOffsets, load_share_partition
from coordinator.share.persister import InitializeStateRequest
from coordinator.share.state import AcquiredRecords, RecordState
from protocol.errors import ErrorCode
from tests.unit.coordinator.share.share_helpers import GROUP, TOPIC_ID, ShareHarness, ack, batches

ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0
LOCK = 30_000


async def test_acknowledged_records_are_not_redelivered_and_in_flight_ones_are():
    h = ShareHarness(updates_per_snapshot=2)
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    sp.acquire("m2", batches(10, 19), 100)
    assert await sp.acknowledge("m1", [ack(0, 3, ACCEPT), ack(5, 5, ACCEPT), ack(6, 6, RELEASE)]) \
        == ErrorCode.NONE
    assert await sp.acknowledge("m2", [ack(12, 13, REJECT)]) == ErrorCode.NONE
    sp2 = await h.failover(sp)
    assert (sp2.start_offset, sp2.end_offset) == (4, 14)
    # 4, 7..9 and 10..11 were acquired (not persisted): delivered again with count 1;
    # 6 was released after one delivery: count 2. 5, 12, 13 are done.
    got = sp2.acquire("m3", batches(0, 19), 100)
    counts = {o: a.delivery_count for a in got for o in range(a.first_offset, a.last_offset + 1)}
    assert counts == {4: 1, 6: 2, 7: 1, 8: 1, 9: 1, 10: 1, 11: 1, 14: 1, 15: 1, 16: 1, 17: 1,
                      18: 1, 19: 1}


async def test_state_is_identical_after_replay_whatever_the_snapshot_cadence():
    finals = []
    for per_snapshot in (0, 1, 3, 500):
        h = ShareHarness(updates_per_snapshot=per_snapshot)
        sp = await h.load()
        rnd = random.Random(7)
        for _ in range(40):
            got = sp.acquire("m", batches(sp.next_fetch_offset(), sp.next_fetch_offset() + 7), 8)
            acks = []
            for a in got:
                types = tuple(rnd.choice((ACCEPT, RELEASE, REJECT))
                              for _ in range(a.last_offset - a.first_offset + 1))
                acks.append(ack(a.first_offset, a.last_offset, *types))
            assert await sp.acknowledge("m", acks) == ErrorCode.NONE
        live = h.coordinator.shard.state(h.coordinator.shard.keys()[0])
        h.coordinator.reload(h._shard())
        replayed = h.coordinator.shard.state(h.coordinator.shard.keys()[0])
        assert (replayed.start_offset, replayed.state_batches) == (live.start_offset, live.state_batches)
        finals.append((live.start_offset, live.state_batches))
        kinds = [r.record_type for r in h.coordinator.records()]
        if per_snapshot == 3:
            assert kinds.count(0) >= 8  # a snapshot every 3 updates
    assert len(set(finals)) == 1


async def test_old_leader_is_fenced_once_the_new_leader_has_read():
    h = ShareHarness()
    old = await h.load()
    old.acquire("m1", batches(0, 4), 100)
    h.leader_epoch += 1
    new = await h.load()  # the old leader is a zombie: not told, still running
    assert await old.acknowledge("m1", [ack(0, 4, ACCEPT)]) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert old.fenced == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # The fence is durable: it survives a share coordinator failover too.
    h.coordinator.reload(h._shard())
    assert new.acquire("m1", batches(0, 4), 100) == [AcquiredRecords(0, 4, 1)]
    assert await new.acknowledge("m1", [ack(0, 4, ACCEPT)]) == ErrorCode.NONE
    h.leader_epoch -= 1
    stale = await load_share_partition(GROUP, TOPIC_ID, 0, config=h.config, timer=h.timer,
                                       persister=h.persister, leader_epoch=h.leader_epoch,
                                       log=h.log, wall_clock_ms=0)
    assert stale == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_backoff_restarts_from_the_load():
    cfg = SharePartitionConfig(redelivery_backoff_ms=2000)
    h = ShareHarness(cfg)
    sp = await h.load()
    sp.acquire("m1", batches(0, 0), 100)
    assert await sp.acknowledge("m1", [ack(0, 0, RELEASE)]) == ErrorCode.NONE
    await h.advance(1500)
    sp2 = await h.failover(sp)
    assert sp2.cache.overlapping(0, 0)[0].state_at(0).state is RecordState.DELAYED
    await h.advance(1999, sp2)
    assert sp2.acquire("m2", batches(0, 0), 100) == []
    await h.advance(1, sp2)
    assert sp2.acquire("m2", batches(0, 0), 100) == [AcquiredRecords(0, 0, 2)]


async def _initial_spso(reset: str, log: LogOffsets, **cfg) -> int:
    h = ShareHarness(SharePartitionConfig(auto_offset_reset=parse_auto_offset_reset(reset), **cfg),
                     log=log)
    sp = await h.load()
    assert h.coordinator.shard.state(h.coordinator.shard.keys()[0]).start_offset == sp.start_offset
    return sp.start_offset


async def test_auto_offset_reset_strategies():
    def by_time(ts):
        return 30 if ts <= 1_700_000_000_000 - 60_000 else None

    log = LogOffsets(log_start_offset=10, high_watermark=50, last_stable_offset=45,
                     offset_for_timestamp=by_time)
    assert await _initial_spso("earliest", log) == 10
    assert await _initial_spso("latest", log) == 50
    assert await _initial_spso("latest", log, isolation_level="read_committed") == 45
    assert await _initial_spso("by_duration:PT1M", log) == 30
    assert await _initial_spso("by_duration:PT1S", log) == 50  # nothing that recent: latest


async def test_initial_spso_is_persisted_so_a_second_leader_keeps_it():
    h = ShareHarness(log=LogOffsets(0, 100))
    sp = await h.load()
    assert sp.start_offset == 100
    h.log = LogOffsets(0, 250)  # more records arrive before the failover
    sp2 = await h.failover(sp)
    assert sp2.start_offset == 100


async def test_retention_past_the_persisted_spso_raises_it_on_load():
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    assert await sp.acknowledge("m1", [ack(0, 1, ACCEPT), ack(2, 9, RELEASE)]) == ErrorCode.NONE
    h.log = LogOffsets(6, 10)
    sp2 = await h.failover(sp)
    assert (sp2.start_offset, sp2.next_fetch_offset()) == (6, 6)
    assert h.coordinator.shard.state(h.coordinator.shard.keys()[0]).start_offset == 6


class Ledger:
    """Tracks what a perfect observer sees: answered ACCEPTs and dead-letter intents."""

    def __init__(self):
        self.accepted: dict[int, int] = {}
        self.rejected: set[int] = set()


async def test_randomized_failovers_never_lose_or_repeat_an_acknowledged_record():
    """Consumers ACCEPT/RELEASE/REJECT at random, locks expire, acknowledgements fail, the
    leader and the coordinator fail over. Invariants: an offset whose ACCEPT was answered
    NONE is never handed out again; at the end every offset is accepted or dead-lettered;
    every dead-letter intent is for a distinct offset and sequences are 0..n-1."""
    n_records = 120
    for seed in range(6):
        rnd = random.Random(seed)
        h = ShareHarness(SharePartitionConfig(dead_letter_topic="dlq", delivery_count_limit=4,
                                              max_record_locks=40),
                         updates_per_snapshot=rnd.choice((0, 2, 5)))
        h.log = LogOffsets(0, 0)
        sp = await h.load()
        done: set[int] = set()  # offsets whose ACCEPT/REJECT was answered NONE
        rejected: set[int] = set()
        completed = set()
        failovers = 0
        for step in range(400):
            op = rnd.random()
            if op < 0.55:
                start = sp.next_fetch_offset()
                if start >= n_records:
                    start = sp.start_offset
                member = f"m{rnd.randrange(3)}"
                got = sp.acquire(member, batches(start, min(start + 9, n_records - 1), size=3), 6)
                for a in got:
                    for o in range(a.first_offset, a.last_offset + 1):
                        assert o not in done, (seed, step, o)
                if got and rnd.random() < 0.8:
                    if rnd.random() < 0.15:
                        h.persister.fail_next()
                    acks = []
                    for a in got:
                        types = tuple(rnd.choice((ACCEPT, ACCEPT, ACCEPT, RELEASE, REJECT))
                                      for _ in range(a.last_offset - a.first_offset + 1))
                        acks.append(ack(a.first_offset, a.last_offset, *types))
                    if await sp.acknowledge(member, acks) == ErrorCode.NONE:
                        for b in acks:
                            for i, o in enumerate(range(b.first_offset, b.last_offset + 1)):
                                if b.acknowledge_types[i] in (ACCEPT, REJECT):
                                    done.add(o)
                                if b.acknowledge_types[i] == REJECT:
                                    rejected.add(o)
            elif op < 0.75:
                await h.advance(rnd.choice((1000, LOCK)), sp)
            elif op < 0.85:
                pending = sp.pending_dead_letters()
                if pending:
                    seqs = [i.sequence for i in pending[: rnd.randrange(1, len(pending) + 1)]]
                    if await sp.complete_dead_letters(seqs) == ErrorCode.NONE:
                        completed.update(seqs)
            elif op < 0.9:
                sp = await h.failover(sp, coordinator_too=rnd.random() < 0.5)
                failovers += 1
            h.log = LogOffsets(0, n_records)
        # Drain: one well-behaved consumer accepts whatever is left.
        for _ in range(200):
            await h.advance(LOCK, sp)
            start = sp.next_fetch_offset()
            if sp.start_offset >= n_records:
                break
            got = sp.acquire("final", batches(start, n_records - 1, size=3), 50)
            for a in got:
                for o in range(a.first_offset, a.last_offset + 1):
                    assert o not in done, (seed, "drain", o)
            if got:
                acks = [ack(a.first_offset, a.last_offset, ACCEPT) for a in got]
                assert await sp.acknowledge("final", acks) == ErrorCode.NONE
                for a in got:
                    done.update(range(a.first_offset, a.last_offset + 1))
        assert sp.start_offset == n_records, seed
        intents = h.listener.dead_letters
        by_seq = {}
        for i in intents:
            assert by_seq.setdefault(i.sequence, i) == i  # a re-send carries the same intent
        assert sorted(by_seq) == list(range(len(by_seq))), seed
        offsets = [i.offset for i in by_seq.values()]
        assert len(offsets) == len(set(offsets)), seed  # no record dead-lettered twice
        assert rejected <= set(offsets), seed  # every answered REJECT has its dead letter
        assert failovers >= 10 and len(rejected) >= 5 and len(offsets) > len(rejected), seed


async def test_offsets_reset_by_initialize_fence_the_leader_until_it_reloads():
    """AlterShareGroupOffsets: InitializeShareGroupState with a bumped state epoch."""
    h = ShareHarness()
    sp = await h.load()
    sp.acquire("m1", batches(0, 9), 100)
    assert await h.coordinator.initialize_state(
        InitializeStateRequest(GROUP, TOPIC_ID, 0, state_epoch=1, start_offset=500)) == ErrorCode.NONE
    assert await sp.acknowledge("m1", [ack(0, 9, ACCEPT)]) == ErrorCode.FENCED_STATE_EPOCH
    assert sp.fenced == ErrorCode.FENCED_STATE_EPOCH
    sp2 = await h.load()  # same leader epoch: the broker reloads the share-partition
    assert (sp2.start_offset, sp2.state_epoch) == (500, 1)
    got = sp2.acquire("m1", batches(495, 504), 100)
    assert got == [AcquiredRecords(500, 504, 1)]
    assert await sp2.acknowledge("m1", [ack(500, 504, ACCEPT)]) == ErrorCode.NONE
