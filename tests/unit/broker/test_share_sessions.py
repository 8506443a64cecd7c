"""Share sessions (KIP-932): epochs, replacement, closing, the session limit and eviction."""

from __future__ import annotations

import uuid

import pytest

from broker.share.sessions import EVICTION_IDLE_MS, ShareSessionCache, next_epoch
from protocol.errors import ErrorCode as E
from protocol.errors import KafkaError

T = uuid.UUID(int=5)


def cache(max_sessions=2):
    now = [0]
    closed = []
    c = ShareSessionCache(max_sessions, on_close=lambda s: closed.append(s.key),
                          time_ms=lambda: now[0])
    return c, now, closed


def code(fn, *args) -> int:
    with pytest.raises(KafkaError) as e:
        fn(*args)
    return e.value.code


def test_epochs_advance_and_mismatches_are_refused():
    c, _, closed = cache()
    s = c.open("g", "m", [((T, 0), "t")])
    assert s.epoch == 1 and list(s.partitions) == [(T, 0)]
    assert c.next("g", "m", 1).epoch == 2
    assert code(c.next, "g", "m", 1) == E.INVALID_SHARE_SESSION_EPOCH
    assert code(c.next, "g", "other", 1) == E.SHARE_SESSION_NOT_FOUND
    c.open("g", "m", [])  # epoch 0 again: the old session is replaced (and released)
    assert closed == [("g", "m")]
    c.close("g", "m")
    assert closed == [("g", "m"), ("g", "m")]
    assert code(c.close, "g", "m") == E.SHARE_SESSION_NOT_FOUND
    assert next_epoch(0x7FFFFFFF) == 1


def test_limit_and_eviction_of_idle_sessions():
    c, now, closed = cache(max_sessions=2)
    c.open("g", "a", [])
    now[0] = 10
    c.open("g", "b", [])
    assert code(c.open, "g", "c", []) == E.SHARE_SESSION_LIMIT_REACHED
    now[0] = EVICTION_IDLE_MS + 5  # "a" idle long enough, "b" too but "a" is older
    c.next("g", "b", 1)
    c.open("g", "c", [])
    assert closed == [("g", "a")] and {s.member_id for s in c.sessions()} == {"b", "c"}
