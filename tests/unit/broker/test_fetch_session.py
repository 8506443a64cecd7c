"""KIP-227 fetch sessions: full / incremental / sessionless contexts, epochs, errors, eviction."""

from __future__ import annotations

import random
import uuid

from broker.fetch_session import INVALID_SESSION_ID, FetchSessionCache, next_epoch
from broker.purgatory.delayed_fetch import FetchPartitionData, PartitionFetchInfo
from protocol.errors import ErrorCode

A, B, C = ("a", 0), ("a", 1), ("b", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def req(*parts, offset=0):
    return [(tp, PartitionFetchInfo(offset, 1000), None) for tp in parts]


def data(hw=10, records=b"", error=ErrorCode.NONE, lso=None, start=0):
    return FetchPartitionData(error, hw, hw if lso is None else lso, start, records)


def cache(**kw):
    kw.setdefault("time_ms", Clock())
    return FetchSessionCache(rng=random.Random(1), **kw)


def open_session(c, parts=(A, B, C), version=12, follower=False):
    ctx = c.new_context(version, 0, 0, req(*parts), [], follower)
    assert ctx.kind == "full"
    sid, out = ctx.update_and_generate_response_data({tp: data() for tp in parts})
    assert [tp for tp, _ in out] == list(parts)
    return sid


def test_next_epoch_wraps_and_final_stays():
    assert next_epoch(0) == 1 and next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1


def test_old_versions_and_final_epoch_are_sessionless():
    c = cache()
    for version, sid, epoch in ((6, 0, 0), (12, 0, -1)):
        ctx = c.new_context(version, sid, epoch, req(A), [], False)
        assert ctx.kind == "sessionless"
        assert ctx.update_and_generate_response_data({A: data()})[0] == INVALID_SESSION_ID
    assert len(c) == 0


def test_full_fetch_creates_session_with_epoch_one():
    c = cache()
    sid = open_session(c)
    assert sid != INVALID_SESSION_ID and c.get(sid).epoch == 1 and len(c.get(sid)) == 3


def test_incremental_returns_only_changed_partitions():
    c = cache()
    sid = open_session(c)
    ctx = c.new_context(12, sid, 1, [], [], False)
    assert ctx.kind == "incremental"
    # read again: none of them was seen caught up (data() has no end offset)
    assert [tp for tp, _ in ctx.partitions_to_fetch()] == [A, B, C]
    results = {A: data(), B: data(hw=11), C: data(records=b"xyz")}
    rsid, out = ctx.update_and_generate_response_data(results)
    assert rsid == sid and [tp for tp, _ in out] == [B, C]
    # returned partitions moved to the end of the session order
    assert list(c.get(sid).partitions) == [A, B, C]
    ctx = c.new_context(12, sid, 2, [], [], False)
    _, out = ctx.update_and_generate_response_data({A: data(), B: data(hw=11),
                                                    C: data(records=b"")})
    assert out == []
    ctx = c.new_context(12, sid, 3, [], [], False)
    _, out = ctx.update_and_generate_response_data({A: data(records=b"1"), B: data(hw=11),
                                                    C: data()})
    assert [tp for tp, _ in out] == [A]
    assert list(c.get(sid).partitions) == [B, C, A]


def test_incremental_errors_always_sent_and_resent():
    c = cache()
    sid = open_session(c, (A,))
    for epoch in (1, 2):
        ctx = c.new_context(12, sid, epoch, [], [], False)
        _, out = ctx.update_and_generate_response_data(
            {A: FetchPartitionData(ErrorCode.NOT_LEADER_OR_FOLLOWER)})
        assert [tp for tp, _ in out] == [A]


def test_incremental_updates_offsets_adds_and_forgets():
    c = cache()
    sid = open_session(c, (A, B))
    ctx = c.new_context(12, sid, 1, req(A, C, offset=7), [B], False)
    fetched = dict(ctx.partitions_to_fetch())
    assert set(fetched) == {A, C} and fetched[A].fetch_offset == 7


def test_forgetting_everything_closes_the_session():
    c = cache()
    sid = open_session(c, (A,))
    ctx = c.new_context(12, sid, 1, [], [A], False)
    assert ctx.kind == "sessionless" and c.get(sid) is None


def test_session_errors():
    c = cache()
    sid = open_session(c, (A,))
    assert c.new_context(12, sid + 1, 1, [], [], False).error == \
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert c.new_context(12, sid, 5, [], [], False).error == \
        ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert c.new_context(13, sid, 1, [], [], False).error == \
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    ctx = c.new_context(12, sid, 1, [], [], False)
    assert ctx.error == ErrorCode.NONE
    assert ctx.update_and_generate_response_data({A: data()})[0] == sid


def test_error_context_fetches_nothing():
    ctx = cache().new_context(12, 42, 3, req(A), [], False)
    assert ctx.partitions_to_fetch() == []
    assert ctx.update_and_generate_response_data({}) == (INVALID_SESSION_ID, [])


def test_full_fetch_with_session_id_closes_old_session():
    c = cache()
    sid = open_session(c, (A,))
    ctx = c.new_context(12, sid, 0, req(B), [], False)
    assert c.get(sid) is None
    new_sid, _ = ctx.update_and_generate_response_data({B: data()})
    assert new_sid not in (sid, INVALID_SESSION_ID)
    assert c.new_context(12, sid, -1, req(A), [], False).kind == "sessionless"


def test_topic_ids_kept_in_session():
    c = cache()
    tid = uuid.uuid4()
    ctx = c.new_context(13, 0, 0, [(A, PartitionFetchInfo(0, 100), tid)], [], False)
    sid, _ = ctx.update_and_generate_response_data({A: data()})
    ctx = c.new_context(13, sid, 1, [], [], False)
    assert ctx.topic_id(A) == tid


def test_cache_disabled_and_full():
    c = cache(max_entries=0)
    assert open_session(c) == INVALID_SESSION_ID
    clock = Clock()
    c = cache(max_entries=2, time_ms=clock)
    s1 = open_session(c, (A, B, C))
    clock.now = 10
    s2 = open_session(c, (A,))
    clock.now = 20
    # a smaller consumer session cannot evict; a bigger one evicts the smallest
    assert open_session(c, (A,)) == INVALID_SESSION_ID
    s3 = open_session(c, (A, B))
    assert s3 != INVALID_SESSION_ID and c.get(s2) is None and c.get(s1) is not None
    # a follower session outranks consumer sessions
    s4 = open_session(c, (A,), follower=True)
    assert s4 != INVALID_SESSION_ID and len(c) == 2
    # stale sessions (> 120 s unused) are evicted first
    clock.now = 200_000
    assert open_session(c, (C,)) != INVALID_SESSION_ID


def caught_up(offset=0, hw=10, start=0, part=None, end_bytes=100):
    """A read that saw everything up to `offset` (nothing left to return)."""
    return FetchPartitionData(ErrorCode.NONE, hw, hw, start, b"", end_offset=offset,
                              end_bytes=end_bytes, partition=part)


class Hosted:
    """What the sweep looks at: a hosted partition's log start offset."""

    def __init__(self, start=0) -> None:
        self.log_start_offset = start


def test_incremental_reads_only_listed_changed_and_pending_partitions():
    """Issue 21: a caught-up, unchanged partition is not read again; a listed one, one
    reported changed, and one left with data or an error are."""
    c = cache()
    parts = {tp: Hosted() for tp in (A, B, C)}
    ctx = c.new_context(12, 0, 0, req(A, B, C), [], True)
    sid, _ = ctx.update_and_generate_response_data(
        {A: caught_up(part=parts[A]), B: caught_up(part=parts[B]),
         C: FetchPartitionData(ErrorCode.NONE, 10, 10, 0, b"xyz", end_offset=10)})
    ctx = c.new_context(12, sid, 1, [], [], True)
    assert [tp for tp, _ in ctx.partitions_to_fetch()] == [C]  # C returned records
    ctx.update_and_generate_response_data({C: caught_up(part=parts[C])})
    ctx = c.new_context(12, sid, 2, [], [], True)
    assert ctx.partitions_to_fetch() == []  # nothing to say: nothing read
    assert c.partition_changed(B) == []  # no fetch parked: B waits for the next one
    ctx = c.new_context(12, sid, 3, req(A, offset=0), [], True)
    assert [tp for tp, _ in ctx.partitions_to_fetch()] == [A, B]  # listed, changed
    ctx.update_and_generate_response_data(
        {A: FetchPartitionData(ErrorCode.NOT_LEADER_OR_FOLLOWER), B: caught_up(part=parts[B])})
    ctx = c.new_context(12, sid, 4, [], [], True)
    assert [tp for tp, _ in ctx.partitions_to_fetch()] == [A]  # errors are read again
    ctx.update_and_generate_response_data({A: caught_up(part=parts[A])})
    c.remove(sid)
    assert c.partition_changed(A) == [] and not c._watchers


def _swept_session():
    """(clock, cache, hosted partitions, session id): a session of A and B, both caught up."""
    clock = Clock()
    c = cache(time_ms=clock)
    parts = {A: Hosted(), B: Hosted()}
    ctx = c.new_context(12, 0, 0, req(A, B), [], True)
    sid, _ = ctx.update_and_generate_response_data(
        {tp: caught_up(part=parts[tp]) for tp in (A, B)})
    return clock, c, parts, sid


def test_sweep_finds_log_start_moves_nobody_reported():
    clock, c, parts, sid = _swept_session()
    parts[B].log_start_offset = 5  # retention or DeleteRecords on the leader
    lookup = parts.get
    ctx = c.new_context(12, sid, 1, [], [], True)
    assert ctx.partitions_to_fetch(lambda t, p: lookup((t, p))) == []  # not yet due
    clock.now += 30_000
    ctx = c.new_context(12, sid, 2, [], [], True)
    assert [tp for tp, _ in ctx.partitions_to_fetch(lambda t, p: lookup((t, p)))] == [B]


def test_sweep_is_skipped_while_the_replica_change_stamp_stays_put():
    clock, c, parts, sid = _swept_session()

    def lookup(t, p):
        return parts.get((t, p))

    clock.now += 30_000
    ctx = c.new_context(12, sid, 1, [], [], True)
    assert ctx.partitions_to_fetch(lookup, stamp_of=lambda: (1, 1, 1)) == []  # swept: nothing moved
    parts[B].log_start_offset = 5
    clock.now += 30_000
    ctx = c.new_context(12, sid, 2, [], [], True)
    assert ctx.partitions_to_fetch(lookup, stamp_of=lambda: (1, 2, 1)) == [(B, ctx.session.partitions[B]
                                                                 .fetch_info())]
    clock.now += 30_000
    ctx.update_and_generate_response_data({B: caught_up(part=parts[B], start=5)})
    parts[A].log_start_offset = 7  # (a move the stamp would show: here it does not)
    ctx = c.new_context(12, sid, 3, [], [], True)
    assert ctx.partitions_to_fetch(lookup, stamp_of=lambda: (1, 2, 1)) == []  # same stamp: not swept


class Waiter:
    """Stands in for the parked DelayedFetch (`add_partition`, `is_completed`)."""

    def __init__(self) -> None:
        self.added = []
        self.is_completed = False

    def add_partition(self, tp, cached) -> None:
        self.added.append((tp, cached.fetch_offset, cached.end_bytes))

    def force_complete(self) -> None:
        self.is_completed = True


def test_a_parked_fetch_takes_in_changed_partitions_and_a_new_request_completes_it():
    c = cache()
    ctx = c.new_context(12, 0, 0, req(A, B, offset=3), [], True)
    sid, _ = ctx.update_and_generate_response_data(
        {tp: caught_up(offset=3, end_bytes=40) for tp in (A, B)})
    session = c.get(sid)
    session.waiter = waiter = Waiter()
    assert c.partition_changed(B) == [session]
    assert waiter.added == [(B, 3, 40)] and not session.changed
    c.new_context(12, sid, 1, [], [], True)  # a client that did not wait for the answer
    assert waiter.is_completed
