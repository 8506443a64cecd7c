"""ShareCoordinatorShard: the *ShareGroupState operations as pure functions, replay, record bytes."""

from __future__ import annotations

import uuid

import pytest

from coordinator.share.coordinator_shard import ShareCoordinatorShard
from coordinator.share.persister import (
    DeleteStateRequest,
    InitializeStateRequest,
    ReadStateRequest,
    ReadStateSummaryRequest,
    WriteStateRequest,
)
from coordinator.share.records import (
    JOSEF_EXTENSION_TAG,
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    BinaryRecordCodec,
    DeadLetterExtension,
    ShareRecord,
    ShareSnapshotValue,
    ShareStateKey,
    ShareUpdateValue,
    decode_extension,
    encode_extension,
)
from coordinator.share.state import DeadLetterIntent, StateBatch
from protocol.errors import ErrorCode, ProtocolError
from protocol.types import ZERO_UUID, encode_unsigned_varint

TID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
KEY = ShareStateKey("g", TID, 0)


class Runtime:
    """Appends what an operation returns and replays it, like the coordinator runtime."""

    def __init__(self, per_snapshot=3, exists=None):
        self.now = 1000
        self.shard = ShareCoordinatorShard(snapshot_update_records_per_snapshot=per_snapshot,
                                           time_ms=lambda: self.now, partition_exists=exists)
        self.log: list[ShareRecord] = []

    def apply(self, records):
        for r in records:
            self.log.append(r)
            self.shard.replay(len(self.log) - 1, r)

    def write(self, start, batches=(), leader_epoch=0, state_epoch=0, **ext):
        records, code = self.shard.write_state(WriteStateRequest(
            "g", TID, 0, state_epoch, leader_epoch, start, tuple(batches), **ext))
        self.apply(records)
        return code

    def read(self, leader_epoch):
        records, result = self.shard.read_state(ReadStateRequest("g", TID, 0, leader_epoch))
        self.apply(records)
        return result


def b(first, last, state, count):
    return StateBatch(first, last, state, count)


def test_first_write_is_a_snapshot_then_updates_then_a_snapshot_every_n():
    rt = Runtime(per_snapshot=3)
    for i in range(8):
        assert rt.write(i, [b(i, i, 2, 1), b(i + 1, i + 1, 0, 1)]) == ErrorCode.NONE
    assert [r.record_type for r in rt.log] == [SHARE_SNAPSHOT, SHARE_UPDATE, SHARE_UPDATE,
                                                SHARE_UPDATE, SHARE_SNAPSHOT, SHARE_UPDATE,
                                                SHARE_UPDATE, SHARE_UPDATE]
    snap = rt.log[4].value
    assert isinstance(snap, ShareSnapshotValue) and snap.snapshot_epoch == 1
    assert rt.shard.prunable_offset() == 4
    state = rt.shard.state(KEY)
    assert state.start_offset == 7
    assert state.state_batches == (b(7, 7, 2, 1), b(8, 8, 0, 1))
    # Update records carry only their runs and the snapshot epoch they apply to.
    upd = rt.log[5].value
    assert isinstance(upd, ShareUpdateValue) and upd.snapshot_epoch == 1
    assert upd.state_batches == (b(5, 5, 2, 1), b(6, 6, 0, 1))


def test_replay_of_the_log_rebuilds_the_same_state():
    rt = Runtime(per_snapshot=2)
    rt.write(0, [b(0, 9, 0, 1)])
    rt.write(0, [b(3, 4, 2, 1)], dead_letters_added=(DeadLetterIntent(0, 5, 2, 1),))
    rt.write(5, [b(5, 5, 4, 2)], dead_letter_producer=(11, 2))
    rt.write(5, [b(6, 6, 0, 2)], dead_letters_done=(0,))
    rt.write(6, [])
    fresh = ShareCoordinatorShard(snapshot_update_records_per_snapshot=2)
    for off, r in enumerate(rt.log):
        fresh.replay(off, r)
    assert fresh.state(KEY) == rt.shard.state(KEY)
    s = fresh.state(KEY)
    assert s.start_offset == 6 and s.dead_letters == () and s.next_dead_letter_sequence == 1
    assert s.dead_letter_producer == (11, 2)


def test_write_fencing_by_leader_and_state_epoch():
    rt = Runtime()
    assert rt.write(0, leader_epoch=5, state_epoch=1) == ErrorCode.NONE
    assert rt.write(0, leader_epoch=4, state_epoch=1) == ErrorCode.FENCED_LEADER_EPOCH
    assert rt.write(0, leader_epoch=5, state_epoch=0) == ErrorCode.FENCED_STATE_EPOCH
    assert rt.write(0, leader_epoch=6, state_epoch=1) == ErrorCode.NONE
    assert len(rt.log) == 2


def test_read_records_a_newer_leader_epoch_durably():
    rt = Runtime()
    result = rt.read(leader_epoch=3)
    assert (result.error_code, result.start_offset, result.state_epoch) == (0, -1, 0)
    assert [r.record_type for r in rt.log] == [SHARE_SNAPSHOT]
    assert rt.write(10, leader_epoch=2) == ErrorCode.FENCED_LEADER_EPOCH
    assert rt.write(10, leader_epoch=3) == ErrorCode.NONE
    result = rt.read(leader_epoch=4)
    assert result.start_offset == 10
    assert rt.log[-1].record_type == SHARE_UPDATE and rt.log[-1].value.leader_epoch == 4
    assert rt.read(leader_epoch=3).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert rt.read(leader_epoch=4).error_code == ErrorCode.NONE
    assert len(rt.log) == 3  # same epoch: nothing new to record


def test_initialize_needs_a_newer_state_epoch_and_keeps_pending_dead_letters():
    rt = Runtime()
    rt.write(0, [b(0, 4, 0, 1)], dead_letters_added=(DeadLetterIntent(0, 2, 1, 1),), leader_epoch=2)
    records, code = rt.shard.initialize_state(InitializeStateRequest("g", TID, 0, 0, 100))
    assert (records, code) == ([], ErrorCode.FENCED_STATE_EPOCH)
    records, code = rt.shard.initialize_state(InitializeStateRequest("g", TID, 0, 1, 100))
    assert code == ErrorCode.NONE
    rt.apply(records)
    s = rt.shard.state(KEY)
    assert (s.state_epoch, s.start_offset, s.state_batches, s.leader_epoch) == (1, 100, (), 2)
    assert [i.sequence for i in s.dead_letters] == [0] and s.next_dead_letter_sequence == 1
    # The leader still writing at state epoch 0 is fenced until it reloads.
    assert rt.write(5, leader_epoch=2, state_epoch=0) == ErrorCode.FENCED_STATE_EPOCH


def test_summary_and_delete():
    rt = Runtime()
    summary = rt.shard.read_state_summary(ReadStateSummaryRequest("g", TID, 0))
    assert (summary.error_code, summary.start_offset) == (0, -1)
    rt.write(7, leader_epoch=1, state_epoch=2)
    summary = rt.shard.read_state_summary(ReadStateSummaryRequest("g", TID, 0))
    assert (summary.state_epoch, summary.leader_epoch, summary.start_offset) == (2, 1, 7)
    records, code = rt.shard.delete_state(DeleteStateRequest("g", TID, 0))
    assert code == ErrorCode.NONE and [r.value for r in records] == [None, None]
    rt.apply(records)
    assert rt.shard.state(KEY) is None and rt.shard.prunable_offset() is None
    assert rt.shard.delete_state(DeleteStateRequest("g", TID, 0)) == ([], ErrorCode.NONE)


def test_invalid_requests():
    rt = Runtime(exists=lambda tid, p: p < 2)
    bad = [
        WriteStateRequest("g", ZERO_UUID, 0, 0, 0, 0),
        WriteStateRequest("g", TID, -1, 0, 0, 0),
    ]
    for req in bad:
        assert rt.shard.write_state(req) == ([], ErrorCode.INVALID_REQUEST)
    assert rt.shard.write_state(WriteStateRequest("g", TID, 5, 0, 0, 0)) \
        == ([], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    _, result = rt.shard.read_state(ReadStateRequest("g", TID, 5, 0))
    assert result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Deleting state of a partition that no longer exists is allowed.
    assert rt.shard.delete_state(DeleteStateRequest("g", TID, 5)) == ([], ErrorCode.NONE)


def test_codec_round_trip_including_the_extension_and_tombstones():
    codec = BinaryRecordCodec()
    ext = DeadLetterExtension((DeadLetterIntent(3, 42, 5, 2), DeadLetterIntent(4, 43, 1, 1)),
                              (1, 2), 5, 900, 3)
    records = [
        ShareRecord(SHARE_SNAPSHOT, ShareStateKey("grp-é", TID, 7), ShareSnapshotValue(
            2, 1, 9, 40, 111, 222, (b(40, 41, 0, 1), b(42, 43, 4, 5)), ext)),
        ShareRecord(SHARE_UPDATE, ShareStateKey("g", TID, 0), ShareUpdateValue(2, -1, -1, ())),
        ShareRecord(SHARE_UPDATE, ShareStateKey("g", TID, 0),
                    ShareUpdateValue(0, 3, 12, (b(12, 12, 2, 1),),
                                     DeadLetterExtension((), (7,), -1, -1, -1))),
        ShareRecord(SHARE_SNAPSHOT, ShareStateKey("g", TID, 0), None),
    ]
    for r in records:
        key, value = codec.encode(r)
        assert codec.decode(key, value) == r
    assert decode_extension(encode_extension(ext)) == ext


def test_codec_layout_matches_the_kafka_schema():
    codec = BinaryRecordCodec()
    key, value = codec.encode(ShareRecord(SHARE_UPDATE, ShareStateKey("g", TID, 1),
                                          ShareUpdateValue(3, 4, 5, (b(5, 6, 2, 1),))))
    assert key == b"\x00\x01" + b"\x00\x01g" + TID.bytes + b"\x00\x00\x00\x01"
    assert value == (b"\x00\x00" + b"\x00\x00\x00\x03" + b"\x00\x00\x00\x04"
                     + (5).to_bytes(8, "big") + b"\x02" + (5).to_bytes(8, "big")
                     + (6).to_bytes(8, "big") + b"\x02" + b"\x00\x01" + b"\x00" + b"\x00")
    # A Kafka reader sees the extension as one unknown tagged field, which it skips.
    ext = DeadLetterExtension((), (1,))
    _, value = codec.encode(ShareRecord(SHARE_UPDATE, KEY, ShareUpdateValue(0, 0, 0, (), ext)))
    payload = encode_extension(ext)
    tags = (encode_unsigned_varint(1) + encode_unsigned_varint(JOSEF_EXTENSION_TAG)
            + encode_unsigned_varint(len(payload)) + payload)
    assert value == b"\x00\x00" + b"\x00" * 16 + b"\x01" + tags


@pytest.mark.parametrize("key,value", [
    (b"\x00", None),
    (b"\x00\x09" + b"\x00\x01g" + TID.bytes + b"\x00\x00\x00\x01", None),
    (b"\x00\x01\x00\x05g", None),
    (b"\x00\x01" + b"\x00\x01g" + TID.bytes + b"\x00\x00\x00\x01", b"\x00\x01"),
    (b"\x00\x01" + b"\x00\x01g" + TID.bytes + b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x03"),
    (b"\x00\x01" + b"\x00\x01g" + TID.bytes + b"\x00\x00\x00\x01",
     b"\x00\x00" + b"\x00" * 16 + b"\x7f"),
])
def test_codec_rejects_malformed_bytes(key, value):
    with pytest.raises(ProtocolError):
        BinaryRecordCodec().decode(key, value)
