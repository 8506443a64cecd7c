"""KIP-227 fetch sessions between followers and leaders (issue 21), over TCP between
in-process brokers (mini_cluster): incremental follower fetches that read only what changed,
recovery from FETCH_SESSION_ID_NOT_FOUND and INVALID_FETCH_SESSION_EPOCH, and sessions
across a leader change."""

from __future__ import annotations

import asyncio

import pytest

from broker.replication.fetcher import ReplicaFetcher
from protocol.errors import ErrorCode
from tests.unit.replication.mini_cluster import MiniCluster, wait_for
from tests.unit.replication.test_replication_inprocess import batch, log_batches, produce

TP = ("t", 0)
IDLE = 20


@pytest.fixture
async def cluster(tmp_path):
    c = await MiniCluster.start(tmp_path, 3, replica_lag_time_max_ms=5000)
    await c.create("t", [1, 2, 3])
    await c.create("idle", [1, 2, 3], partitions=IDLE)
    await wait_for(lambda: all(len(c.partition(1, t, p).isr) == 3
                               for t, p in [TP] + [("idle", i) for i in range(IDLE)]),
                   what="ISRs complete")
    yield c
    await c.shutdown()


def fetcher_of(cluster, broker: int, tp=TP) -> ReplicaFetcher:
    return cluster.rm(broker).fetcher_manager.fetcher_for(tp)


def follower_sessions(cluster, leader: int) -> dict:
    cache = cluster.brokers[leader].services.fetch_session_cache
    return {s.id: s for s in cache.sessions.values() if s.privileged}


def spy_session_errors(fetcher: ReplicaFetcher) -> list[int]:
    """Records the top-level error code of every fetch answer the follower handles."""
    seen: list[int] = []
    handler = fetcher.session
    original = handler.handle_response

    def handle_response(error_code, session_id, names, full):
        seen.append(error_code)
        return original(error_code, session_id, names, full)

    handler.handle_response = handle_response
    return seen


async def test_followers_fetch_incrementally_and_the_leader_reads_only_what_changed(cluster):
    # the idle partitions' high watermarks moved when their ISRs completed: the followers'
    # fetch that reads those moves may still be parked; the second append completes it
    await produce(cluster, 1, batch(2))
    await produce(cluster, 1, batch(2))
    sessions = follower_sessions(cluster, 1)
    assert len(sessions) == 2 and all(len(s) == 1 + IDLE for s in sessions.values())
    rm = cluster.rm(1)
    reads: list[set] = []
    original = rm.read_from_local_log

    def read_from_local_log(params, fetch_infos):
        if params.replica_id >= 0:
            reads.append({tp for tp, _ in fetch_infos})
        return original(params, fetch_infos)

    rm.read_from_local_log = read_from_local_log
    before = {b: fetcher_of(cluster, b).session.incremental_fetches for b in (2, 3)}
    for _ in range(5):
        assert (await produce(cluster, 1, batch(3))).error == ErrorCode.NONE
    assert reads and all(r <= {TP} for r in reads), reads  # idle partitions are not read
    for b in (2, 3):
        f = fetcher_of(cluster, b)
        assert f.session.incremental_fetches > before[b]
        assert f.session.session_id in sessions
        await wait_for(lambda b=b: cluster.partition(b, *TP).log_end_offset == 19)
        assert log_batches(cluster.partition(b, *TP)) == log_batches(cluster.partition(1, *TP))


async def test_evicted_session_answers_not_found_and_the_follower_starts_a_new_one(cluster):
    await produce(cluster, 1, batch(1))
    fetcher = fetcher_of(cluster, 2)
    old = fetcher.session.session_id
    seen = spy_session_errors(fetcher)
    cache = cluster.brokers[1].services.fetch_session_cache
    cache.remove(old)  # as an eviction by a more valuable session would
    for _ in range(3):
        assert (await produce(cluster, 1, batch(2))).error == ErrorCode.NONE
    await wait_for(lambda: ErrorCode.FETCH_SESSION_ID_NOT_FOUND in seen,
                   what="FETCH_SESSION_ID_NOT_FOUND answered")
    await wait_for(lambda: fetcher.session.session_id not in (0, old) and
                   fetcher.session.session_id in cache.sessions, what="a new session")
    assert len(cache.get(fetcher.session.session_id)) == 1 + IDLE
    await wait_for(lambda: cluster.partition(2, *TP).log_end_offset == 7)
    assert log_batches(cluster.partition(2, *TP)) == log_batches(cluster.partition(1, *TP))


async def test_wrong_epoch_answers_invalid_epoch_and_the_follower_reopens(cluster):
    await produce(cluster, 1, batch(1))
    fetcher = fetcher_of(cluster, 3)
    sid = fetcher.session.session_id
    seen = spy_session_errors(fetcher)
    session = cluster.brokers[1].services.fetch_session_cache.get(sid)
    session.epoch += 7  # the leader and the follower disagree on the next epoch
    for _ in range(3):
        assert (await produce(cluster, 1, batch(2))).error == ErrorCode.NONE
    await wait_for(lambda: ErrorCode.INVALID_FETCH_SESSION_EPOCH in seen,
                   what="INVALID_FETCH_SESSION_EPOCH answered")
    cache = cluster.brokers[1].services.fetch_session_cache
    await wait_for(lambda: fetcher.session.session_id in cache.sessions and
                   fetcher.session.session_id != sid, what="a new session")
    assert sid not in cache.sessions  # the follower closed the old one
    await wait_for(lambda: cluster.partition(3, *TP).log_end_offset == 7)
    assert log_batches(cluster.partition(3, *TP)) == log_batches(cluster.partition(1, *TP))


async def test_sessions_follow_a_leader_change(cluster):
    await produce(cluster, 1, batch(2))
    await cluster.elect("t", 0, 2)
    await wait_for(lambda: cluster.partition(2, *TP).is_leader)
    for _ in range(3):
        assert (await produce(cluster, 2, batch(2))).error == ErrorCode.NONE
    # brokers 1 and 3 fetch t-0 from broker 2 in sessions of their own there...
    sessions = follower_sessions(cluster, 2)
    holders = [s for s in sessions.values() if TP in s.partitions]
    assert len(holders) == 2
    # ...and broker 3's session on broker 1 forgot it (only the idle partitions are left)
    await wait_for(lambda: all(TP not in s.partitions
                               for s in follower_sessions(cluster, 1).values()),
                   what="t-0 forgotten on the old leader")
    for b in (1, 3):
        await wait_for(lambda b=b: cluster.partition(b, *TP).log_end_offset == 8)
        assert log_batches(cluster.partition(b, *TP)) == log_batches(cluster.partition(2, *TP))
    # back to broker 1: the sessions move again and nothing is lost
    await cluster.elect("t", 0, 1)
    await wait_for(lambda: cluster.partition(1, *TP).is_leader)
    assert (await produce(cluster, 1, batch(1))).error == ErrorCode.NONE
    for b in (2, 3):
        await wait_for(lambda b=b: cluster.partition(b, *TP).log_end_offset == 9)
        assert log_batches(cluster.partition(b, *TP)) == log_batches(cluster.partition(1, *TP))


async def test_a_change_to_an_idle_partition_wakes_the_parked_session_fetch(tmp_path):
    """The followers' fetches park on the whole session; an append to one idle partition
    among many reaches them at once, not after replica.fetch.wait.max.ms (5 s here)."""
    c = await MiniCluster.start(tmp_path, 3, props={"replica.fetch.wait.max.ms": "5000"})
    try:
        await c.create("idle", [1, 2, 3], partitions=IDLE)
        await wait_for(lambda: all(len(c.partition(1, "idle", i).isr) == 3
                                   for i in range(IDLE)), what="ISRs complete")
        await asyncio.sleep(0.3)  # the followers' fetches are parked on the leader
        loop = asyncio.get_running_loop()
        start = loop.time()
        res = c.rm(1).append_records(10000, -1, {("idle", 7): batch(1)})
        if isinstance(res, asyncio.Future):
            res = await res
        assert res[("idle", 7)].error == ErrorCode.NONE
        assert loop.time() - start < 2.5
    finally:
        await c.shutdown()


async def test_a_follower_left_without_a_session_keeps_replicating(tmp_path):
    """max.incremental.fetch.session.cache.slots=1: the leader keeps one follower session;
    the other follower's full fetches are answered with session id 0 and it goes on
    fetching in full (sessionless), losing nothing."""
    c = await MiniCluster.start(tmp_path, 3, props={
        "max.incremental.fetch.session.cache.slots": "1"})
    try:
        await c.create("t", [1, 2, 3])
        await wait_for(lambda: len(c.partition(1, *TP).isr) == 3, what="ISR complete")
        for _ in range(5):
            assert (await produce(c, 1, batch(2))).error == ErrorCode.NONE
        cache = c.brokers[1].services.fetch_session_cache
        assert len(cache) == 1
        ids = {b: fetcher_of(c, b).session.session_id for b in (2, 3)}
        assert sorted(i == 0 for i in ids.values()) == [False, True]  # one of each
        for b in (2, 3):
            await wait_for(lambda b=b: c.partition(b, *TP).log_end_offset == 10)
            assert log_batches(c.partition(b, *TP)) == log_batches(c.partition(1, *TP))
    finally:
        await c.shutdown()
