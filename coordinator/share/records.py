"""`__share_group_state` records: ShareSnapshot / ShareUpdate as dataclasses, and their bytes.

Kafka's share coordinator stores, per key (group, topic id, partition), a ShareSnapshot (the
full state) followed by ShareUpdates (changed runs only) (coordinator-records-4.2/
ShareSnapshot*.json, ShareUpdate*.json). Record layout (Kafka's CoordinatorRecordSerde):

    key    int16 record type (0 = ShareSnapshot, 1 = ShareUpdate) | key v0, not flexible:
           string GroupId (int16 length) | uuid TopicId (16 bytes) | int32 Partition
    value  int16 version (0) | value v0, flexible:
           ShareSnapshotValue: int32 SnapshotEpoch, int32 StateEpoch, int32 LeaderEpoch,
             int64 StartOffset, int64 CreateTimestamp, int64 WriteTimestamp, StateBatches
           ShareUpdateValue: int32 SnapshotEpoch, int32 LeaderEpoch, int64 StartOffset
             (-1: unchanged), StateBatches
           StateBatches: compact array of {int64 FirstOffset, int64 LastOffset,
             int8 DeliveryState, int16 DeliveryCount, tagged fields}, then the value's
             tagged fields
    a null value is a tombstone (DeleteShareGroupState).

Josef's dead-letter outbox (see `coordinator.share.dead_letter`) is one tagged field,
`JOSEF_EXTENSION_TAG`, on both values; Kafka's readers skip unknown tags, so the topic stays
readable by Kafka tools. Its payload (`encode_extension`):

    uvarint format (0) | int64 producer id | int16 producer epoch | int32 next sequence
    (-1 in updates) | uvarint n, n x {int32 sequence, int64 offset, int16 delivery count,
    int8 reason} (intents added / pending) | uvarint m, m x int32 sequence (done)

The codec seam: `RecordCodec` (encode a `ShareRecord` to key/value bytes and back).
`BinaryRecordCodec` writes the layout above; phase B may swap in the generated message
classes (protocol.messages) behind the same two methods. Decode errors raise
`protocol.errors.ProtocolError` subclasses (TruncatedError, UnsupportedVersionError).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

from coordinator.share.state import DeadLetterIntent, StateBatch
from protocol.errors import TruncatedError, UnsupportedVersionError
from protocol.types import (
    INT8,
    INT16,
    INT32,
    INT64,
    decode_string,
    decode_tagged_fields,
    decode_unsigned_varint,
    encode_string,
    encode_tagged_fields,
    encode_unsigned_varint,
)

__all__ = [
    "BinaryRecordCodec",
    "DeadLetterExtension",
    "JOSEF_EXTENSION_TAG",
    "RecordCodec",
    "SHARE_SNAPSHOT",
    "SHARE_UPDATE",
    "ShareRecord",
    "ShareSnapshotValue",
    "ShareStateKey",
    "ShareUpdateValue",
    "decode_extension",
    "encode_extension",
]

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
#: Tag of Josef's dead-letter extension in ShareSnapshotValue / ShareUpdateValue (and in the
#: WriteShareGroupState / ReadShareGroupState partition data).
JOSEF_EXTENSION_TAG = 10_000


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """(GroupId, TopicId, Partition): one share-partition's state in `__share_group_state`."""

    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class DeadLetterExtension:
    """Josef's outbox fields. Snapshots: `dead_letters` pending, `next_sequence` set.
    Updates: `dead_letters` added, `done` completed, `next_sequence` -1."""

    dead_letters: tuple[DeadLetterIntent, ...] = ()
    done: tuple[int, ...] = ()
    next_sequence: int = -1
    producer_id: int = -1
    producer_epoch: int = -1

    @property
    def empty(self) -> bool:
        return self == _NO_EXTENSION or self == _EMPTY_SNAPSHOT_EXTENSION


_NO_EXTENSION = DeadLetterExtension()
_EMPTY_SNAPSHOT_EXTENSION = DeadLetterExtension(next_sequence=0)


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = ()
    extension: DeadLetterExtension = _EMPTY_SNAPSHOT_EXTENSION


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()
    extension: DeadLetterExtension = _NO_EXTENSION


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One `__share_group_state` record; `value` None is a tombstone of `record_type`."""

    record_type: int
    key: ShareStateKey
    value: ShareSnapshotValue | ShareUpdateValue | None


class RecordCodec(Protocol):
    def encode(self, record: ShareRecord) -> tuple[bytes, bytes | None]:
        """Key bytes and value bytes (None for a tombstone)."""

    def decode(self, key: bytes, value: bytes | None) -> ShareRecord:
        """The record; ProtocolError subclasses on malformed input."""


def encode_extension(ext: DeadLetterExtension) -> bytes:
    out = bytearray(encode_unsigned_varint(0))
    out += INT64.pack(ext.producer_id) + INT16.pack(ext.producer_epoch)
    out += INT32.pack(ext.next_sequence)
    out += encode_unsigned_varint(len(ext.dead_letters))
    for i in ext.dead_letters:
        out += INT32.pack(i.sequence) + INT64.pack(i.offset)
        out += INT16.pack(i.delivery_count) + INT8.pack(i.reason)
    out += encode_unsigned_varint(len(ext.done))
    for s in ext.done:
        out += INT32.pack(s)
    return bytes(out)


def decode_extension(buf: bytes) -> DeadLetterExtension:
    r = _Reader(buf)
    fmt = r.uvarint()
    if fmt != 0:
        raise UnsupportedVersionError(f"unknown Josef share-state extension format {fmt}")
    producer_id, producer_epoch, next_sequence = r.int(INT64), r.int(INT16), r.int(INT32)
    intents = tuple(
        DeadLetterIntent(r.int(INT32), r.int(INT64), r.int(INT16), r.int(INT8))
        for _ in range(r.count(15))
    )
    done = tuple(r.int(INT32) for _ in range(r.count(4)))
    return DeadLetterExtension(intents, done, next_sequence, producer_id, producer_epoch)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos

    def int(self, st) -> int:
        if self.pos + st.size > len(self.buf):
            raise TruncatedError("share state record truncated")
        (v,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def uvarint(self) -> int:
        v, self.pos = decode_unsigned_varint(self.buf, self.pos)
        return v

    def count(self, item_size: int) -> int:
        n = self.uvarint()
        if n * item_size > len(self.buf) - self.pos:
            raise TruncatedError("share state array longer than the record")
        return n


class BinaryRecordCodec:
    """The layout in the module docstring, written with protocol.types primitives."""

    def encode(self, record: ShareRecord) -> tuple[bytes, bytes | None]:
        k = record.key
        key = (INT16.pack(record.record_type) + encode_string(k.group_id) + k.topic_id.bytes
               + INT32.pack(k.partition))
        v = record.value
        if v is None:
            return key, None
        out = bytearray(INT16.pack(0))
        if isinstance(v, ShareSnapshotValue):
            out += INT32.pack(v.snapshot_epoch) + INT32.pack(v.state_epoch)
            out += INT32.pack(v.leader_epoch) + INT64.pack(v.start_offset)
            out += INT64.pack(v.create_timestamp) + INT64.pack(v.write_timestamp)
        else:
            out += INT32.pack(v.snapshot_epoch) + INT32.pack(v.leader_epoch)
            out += INT64.pack(v.start_offset)
        out += encode_unsigned_varint(len(v.state_batches) + 1)
        for b in v.state_batches:
            out += INT64.pack(b.first_offset) + INT64.pack(b.last_offset)
            out += INT8.pack(b.delivery_state) + INT16.pack(b.delivery_count) + b"\x00"
        tags = None if v.extension.empty else {JOSEF_EXTENSION_TAG: encode_extension(v.extension)}
        encode_tagged_fields(tags, out)
        return key, bytes(out)

    def decode(self, key: bytes, value: bytes | None) -> ShareRecord:
        r = _Reader(key)
        record_type = r.int(INT16)
        if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
            raise UnsupportedVersionError(f"not a share state record type: {record_type}")
        group_id, r.pos = decode_string(r.buf, r.pos, nullable=False)
        if r.pos + 16 > len(r.buf):
            raise TruncatedError("share state key truncated")
        topic_id = uuid.UUID(bytes=bytes(r.buf[r.pos:r.pos + 16]))
        r.pos += 16
        skey = ShareStateKey(group_id, topic_id, r.int(INT32))
        if value is None:
            return ShareRecord(record_type, skey, None)
        r = _Reader(value)
        version = r.int(INT16)
        if version != 0:
            raise UnsupportedVersionError(f"share state value version {version}")
        if record_type == SHARE_SNAPSHOT:
            head = [r.int(INT32), r.int(INT32), r.int(INT32), r.int(INT64), r.int(INT64), r.int(INT64)]
        else:
            head = [r.int(INT32), r.int(INT32), r.int(INT64)]
        n = r.uvarint() - 1
        if n < 0 or n * 20 > len(r.buf) - r.pos:
            raise TruncatedError("share state batches truncated")
        batches = []
        for _ in range(n):
            batches.append(StateBatch(r.int(INT64), r.int(INT64), r.int(INT8), r.int(INT16)))
            _, r.pos = decode_tagged_fields(r.buf, r.pos)
        tags, r.pos = decode_tagged_fields(r.buf, r.pos)
        raw = (tags or {}).get(JOSEF_EXTENSION_TAG)
        if record_type == SHARE_SNAPSHOT:
            ext = decode_extension(raw) if raw is not None else _EMPTY_SNAPSHOT_EXTENSION
            return ShareRecord(record_type, skey, ShareSnapshotValue(*head, tuple(batches), ext))
        ext = decode_extension(raw) if raw is not None else _NO_EXTENSION
        return ShareRecord(record_type, skey, ShareUpdateValue(*head, tuple(batches), ext))
