"""The follower's side of KIP-227 (broker.replication.fetch_session_handler): full then
incremental fetches, forgotten partitions, and what each answer does to the session."""

from __future__ import annotations

import uuid

from broker.replication.fetch_session_handler import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionHandler,
    PartitionSpec,
)
from protocol.errors import ErrorCode

A, B, C = ("a", 0), ("a", 1), ("b", 0)
TID, TID_B = uuid.uuid4(), uuid.uuid4()


def spec(offset=0, epoch=0, start=0, tid=TID):
    return PartitionSpec(tid, offset, start, 1 << 20, epoch, epoch)


class Partitions:
    """The fetcher's view: specs by partition (None = not to fetch)."""

    def __init__(self, **kw) -> None:
        self.specs = {A: spec(), B: spec(), C: spec(tid=TID_B)}
        self.specs.update(kw)

    def build(self, handler, changed=(), sessions=True):
        return handler.build(changed, self.specs.get, lambda: list(self.specs), True, sessions)


def test_full_fetch_then_incremental_with_only_the_changes():
    h, p = FetchSessionHandler(1), Partitions()
    data = p.build(h)
    assert data.full and data.session_id == 0 and data.session_epoch == INITIAL_EPOCH
    assert set(data.to_send) == {A, B, C} and data.to_forget == []
    assert h.handle_response(ErrorCode.NONE, 77, [A, B, C], True)
    assert (h.session_id, h.epoch) == (77, 1)
    p.specs[B] = spec(offset=5)
    data = p.build(h, changed=[A, B])  # A's spec is the same: not sent
    assert not data.full and (data.session_id, data.session_epoch) == (77, 1)
    assert list(data.to_send) == [B] and data.to_forget == []
    assert h.handle_response(ErrorCode.NONE, 77, [B], False) and h.epoch == 2
    p.specs[C] = None  # backing off: forgotten, then back
    data = p.build(h, changed=[C])
    assert data.to_send == {} and data.to_forget == [C] and C not in data.session
    h.handle_response(ErrorCode.NONE, 77, [], False)
    p.specs[C] = spec(offset=9, tid=TID_B)
    data = p.build(h, changed=[C])
    assert list(data.to_send) == [C] and h.epoch == 3
    assert h.topic_names == {TID: "a", TID_B: "b"}  # for Fetch v13+ answers


def test_epochs_wrap_to_one():
    h, p = FetchSessionHandler(1), Partitions()
    p.build(h)
    h.handle_response(ErrorCode.NONE, 5, [A], True)
    h.epoch = 0x7FFFFFFF
    p.build(h)
    h.handle_response(ErrorCode.NONE, 5, [], False)
    assert h.epoch == 1


def test_session_id_not_found_starts_over_with_a_full_fetch():
    h, p = FetchSessionHandler(1), Partitions()
    p.build(h)
    h.handle_response(ErrorCode.NONE, 5, [A, B, C], True)
    p.build(h)
    assert not h.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [], False)
    data = p.build(h)
    assert data.full and data.session_id == 0 and data.session_epoch == INITIAL_EPOCH


def test_invalid_epoch_and_other_errors_close_the_session_and_open_a_new_one():
    for error in (ErrorCode.INVALID_FETCH_SESSION_EPOCH, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
                  ErrorCode.UNKNOWN_SERVER_ERROR):
        h, p = FetchSessionHandler(1), Partitions()
        p.build(h)
        h.handle_response(ErrorCode.NONE, 5, [A, B, C], True)
        p.build(h)
        assert not h.handle_response(error, 0, [], False)
        data = p.build(h)  # our id with epoch 0: the leader closes it and makes another
        assert data.full and (data.session_id, data.session_epoch) == (5, INITIAL_EPOCH)
        assert set(data.to_send) == {A, B, C}
    h.handle_error()  # a lost connection: the same
    assert p.build(h).session_epoch == INITIAL_EPOCH


def test_answers_outside_the_session_and_sessionless_leaders():
    h, p = FetchSessionHandler(1), Partitions()
    p.build(h)
    assert not h.handle_response(ErrorCode.NONE, 5, [("z", 0)], True)  # not asked
    assert p.build(h).session_id == 0
    h.handle_response(ErrorCode.NONE, 0, [A], True)  # the leader keeps no session
    assert p.build(h).full
    data = p.build(h, sessions=False)  # Fetch < v7
    assert data.full and (data.session_id, data.session_epoch) == (0, FINAL_EPOCH)


def test_switching_to_topic_ids_opens_a_new_session():
    h, p = FetchSessionHandler(1), Partitions()
    h.build((), p.specs.get, lambda: list(p.specs), False)
    h.handle_response(ErrorCode.NONE, 5, [A], True)
    data = h.build((), p.specs.get, lambda: list(p.specs), True)
    assert data.full and data.session_epoch == INITIAL_EPOCH
