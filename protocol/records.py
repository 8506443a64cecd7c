"""Record batches, magic v2 (Kafka docs implementation.html §5.3.1-5.3.3, KIP-98).

Layouts, varints and the format errors: ``protocol.record_format``; building batches:
``protocol.record_builder``.

Malformed input raises ``CorruptRecordError`` (``CORRUPT_MESSAGE``); semantically invalid
records (e.g. a control batch without a valid marker) raise ``InvalidRecordError``
(``INVALID_RECORD``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from protocol import compression
from protocol.record_format import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_MASK,
    CRC_OFFSET,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    CorruptRecordError,
    InvalidRecordError,
    read_varint,
)
from protocol.record_format import CONTROL_KEY as _CONTROL_KEY
from protocol.record_format import CONTROL_VALUE as _CONTROL_VALUE
from protocol.record_format import UINT32 as _UINT32

__all__ = ["ControlRecord", "Record", "RecordBatch", "iter_batches", "iter_batches_lenient",
           "parse_control_record", "peek_magic"]

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_LENGTH_AND_MAGIC = struct.Struct(">qiib")  # baseOffset, batchLength, leader epoch, magic


class ControlRecord(NamedTuple):
    """A decoded transaction marker: ``type`` is 0 (abort) or 1 (commit)."""

    version: int
    type: int
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.type == CONTROL_COMMIT


class Record:
    """One decoded record; ``offset`` and ``timestamp`` (ms) are absolute."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers", "attributes")

    def __init__(self, offset, timestamp, key, value, headers, attributes=0):
        self.offset: int = offset
        self.timestamp: int = timestamp
        self.key: bytes | None = key
        self.value: bytes | None = value
        self.headers: list[tuple[str, bytes | None]] = headers
        self.attributes: int = attributes

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self):
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r:.60}, headers={self.headers!r})"
        )


def _read_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    """Read a varint length (-1 = null) and that many bytes, not past ``end``."""
    b = buf[pos]
    if b < 0x80:
        n = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        n, pos = read_varint(buf, pos, 5)
    if n < 0:
        if n != -1:
            raise CorruptRecordError(f"invalid length {n}")
        return None, pos
    stop = pos + n
    if stop > end:
        raise CorruptRecordError("record field runs past the end of the record")
    return buf[pos:stop], stop


def _decode_record(buf: bytes, p: int, end: int, base_offset: int, base_ts: int, ts_override):
    """Decode the record body in ``buf[p:end]`` (``buf`` is bytes: fast indexing and
    slicing). Reading past ``end`` is caught by the final position check; past the buffer
    by the caller (IndexError)."""
    attributes = buf[p]
    ts_delta, p = read_varint(buf, p + 1, 10)
    b = buf[p]
    if b < 0x80:
        offset_delta = (b >> 1) ^ -(b & 1)
        p += 1
    else:
        offset_delta, p = read_varint(buf, p, 5)
    key, p = _read_bytes(buf, p, end)
    value, p = _read_bytes(buf, p, end)
    n_headers = buf[p]
    if n_headers < 0x80:
        n_headers = (n_headers >> 1) ^ -(n_headers & 1)
        p += 1
    else:
        n_headers, p = read_varint(buf, p, 5)
    if n_headers < 0:
        raise CorruptRecordError(f"invalid header count {n_headers}")
    headers = []
    for _ in range(n_headers):
        hkey, p = _read_bytes(buf, p, end)
        if hkey is None:
            raise CorruptRecordError("null header key")
        try:
            hkey_str = hkey.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not valid UTF-8") from None
        hvalue, p = _read_bytes(buf, p, end)
        headers.append((hkey_str, hvalue))
    if p != end:
        raise CorruptRecordError(f"record length does not match its fields ({end - p} bytes)")
    ts = base_ts + ts_delta if ts_override is None else ts_override
    return Record(base_offset + offset_delta, ts, key, value, headers, attributes)


# --- RecordBatch ----------------------------------------------------------------------------


class RecordBatch:
    """Zero-copy view of one magic-v2 batch at ``buf[offset:]``.

    ``buf`` may be bytes (read-only view) or a bytearray/writable memoryview (needed for the
    ``set_*`` patch methods). Construction checks only that the 61-byte header and the whole
    batch (``batchLength + 12`` bytes) fit in ``buf`` and that magic is 2, raising
    ``CorruptRecordError`` otherwise; call ``validate()`` for the CRC.
    """

    __slots__ = (
        "_buf",
        "_off",
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "record_count",
    )

    def __init__(self, buf, offset: int = 0):
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        if offset < 0 or len(mv) - offset < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch header needs {BATCH_HEADER_SIZE} bytes, {len(mv) - offset} left"
            )
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = BATCH_HEADER.unpack_from(mv, offset)
        if self.magic != MAGIC_V2:
            raise CorruptRecordError(f"unsupported record batch magic {self.magic}")
        if self.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"record batch length {self.batch_length} too small")
        if offset + self.batch_length + LOG_OVERHEAD > len(mv):
            raise CorruptRecordError(
                f"record batch of {self.batch_length + LOG_OVERHEAD} bytes is truncated "
                f"({len(mv) - offset} available)"
            )
        self._buf = mv
        self._off = offset

    # --- derived header values -----------------------------------------------------------

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wraps at int32 max), -1 without a base sequence."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % 0x80000000

    @property
    def buffer(self) -> memoryview:
        """The batch's bytes (a view, ``size_in_bytes`` long)."""
        return self._buf[self._off : self._off + self.size_in_bytes]

    # --- CRC ------------------------------------------------------------------------------

    def compute_crc(self) -> int:
        """CRC-32C of the batch from ``attributes`` to its end."""
        return crc32c.crc32c(
            self._buf[self._off + ATTRIBUTES_OFFSET : self._off + self.size_in_bytes]
        )

    def is_valid(self) -> bool:
        return self.compute_crc() == self.crc

    def validate(self) -> None:
        """Raise ``CorruptRecordError`` if the stored CRC does not match or counts are bad."""
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptRecordError(
                f"record batch CRC mismatch: stored {self.crc:#010x}, computed {computed:#010x}"
            )
        if self.record_count < 0 or self.last_offset_delta < 0:
            raise CorruptRecordError(
                f"invalid record count {self.record_count} / last offset delta "
                f"{self.last_offset_delta}"
            )

    # --- in-place patching (needs a writable buffer) ---------------------------------------

    def set_base_offset(self, base_offset: int) -> None:
        """Write ``baseOffset`` (outside the CRC; the CRC stays valid)."""
        _INT64.pack_into(self._buf, self._off, base_offset)
        self.base_offset = base_offset

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Write ``partitionLeaderEpoch`` (outside the CRC; the CRC stays valid)."""
        _INT32.pack_into(self._buf, self._off + 12, epoch)
        self.partition_leader_epoch = epoch

    def set_max_timestamp(self, timestamp: int, timestamp_type: int) -> None:
        """Write ``maxTimestamp`` (ms) and the timestamp-type bit, then recompute the CRC.

        Used with ``LOG_APPEND_TIME`` when the topic's ``message.timestamp.type`` is
        LogAppendTime: record timestamps then read as the batch's ``maxTimestamp``.
        """
        attributes = self.attributes & ~TIMESTAMP_TYPE_MASK
        if timestamp_type == LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        _INT16.pack_into(self._buf, self._off + ATTRIBUTES_OFFSET, attributes)
        _INT64.pack_into(self._buf, self._off + MAX_TIMESTAMP_OFFSET, timestamp)
        self.attributes = attributes
        self.max_timestamp = timestamp
        self.crc = self.compute_crc()
        _UINT32.pack_into(self._buf, self._off + CRC_OFFSET, self.crc)

    # --- records ---------------------------------------------------------------------------

    def records_payload(self, max_decompressed_size: int | None = None) -> bytes | memoryview:
        """The (decompressed) records section: a view if uncompressed, else new bytes."""
        raw = self._buf[self._off + BATCH_HEADER_SIZE : self._off + self.size_in_bytes]
        codec = self.compression_type
        if codec == 0:
            return raw
        if max_decompressed_size is None:
            max_decompressed_size = compression.DEFAULT_MAX_DECOMPRESSED_SIZE
        return compression.decompress(codec, raw, max_decompressed_size)

    def iter_records(self, max_decompressed_size: int | None = None) -> Iterator[Record]:
        """Yield each ``Record``; raises ``CorruptRecordError`` on malformed records or a count
        that does not match ``recordsCount``."""
        if self.record_count < 0:
            raise CorruptRecordError(f"invalid record count {self.record_count}")
        data = bytes(self.records_payload(max_decompressed_size))  # one copy; fast indexing
        ts_override = self.max_timestamp if self.timestamp_type == LOG_APPEND_TIME else None
        base_offset = self.base_offset
        base_ts = self.base_timestamp
        end = len(data)
        pos = 0
        for _ in range(self.record_count):
            length, pos = read_varint(data, pos, 5)
            rec_end = pos + length
            if length <= 0 or rec_end > end:
                raise CorruptRecordError(f"invalid record length {length} at byte {pos}")
            try:
                record = _decode_record(data, pos, rec_end, base_offset, base_ts, ts_override)
            except IndexError:
                raise CorruptRecordError("truncated record") from None
            pos = rec_end
            yield record
        if pos != end:
            raise CorruptRecordError(
                f"{end - pos} bytes left after the {self.record_count} declared records"
            )

    def __iter__(self) -> Iterator[Record]:
        return self.iter_records()

    def control_record(self) -> ControlRecord:
        """Decode the marker of a control batch; ``InvalidRecordError`` if it has none."""
        if not self.is_control:
            raise InvalidRecordError("not a control batch")
        for record in self.iter_records():
            return parse_control_record(record.key, record.value)
        raise InvalidRecordError("control batch without records")

    def __repr__(self):
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.record_count}, codec={self.compression_type}, "
            f"producer_id={self.producer_id}, transactional={self.is_transactional}, "
            f"control={self.is_control}, size={self.size_in_bytes})"
        )


def parse_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Decode a control record's key/value; raises ``InvalidRecordError`` if malformed."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise InvalidRecordError("control record key too short")
    key_version, ctype = _CONTROL_KEY.unpack_from(key)
    if ctype not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise InvalidRecordError(f"unknown control record type {ctype}")
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise InvalidRecordError("control record value too short")
    _value_version, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    return ControlRecord(key_version, ctype, coordinator_epoch)


def peek_magic(buf, offset: int = 0) -> int:
    """The magic byte (offset 16) shared by v0/v1 messages and v2 batches."""
    if len(buf) - offset <= MAGIC_OFFSET:
        raise CorruptRecordError("too short to hold a magic byte")
    return struct.unpack_from(">b", buf, offset + MAGIC_OFFSET)[0]


def iter_batches(buf, offset: int = 0) -> Iterator[RecordBatch]:
    """Yield consecutive batches from ``buf[offset:]``; a torn or short tail raises
    ``CorruptRecordError``. CRCs are not checked here (call ``validate()``)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    while offset < end:
        batch = RecordBatch(mv, offset)
        offset += batch.size_in_bytes
        yield batch


def iter_batches_lenient(buf, offset: int = 0) -> Iterator[RecordBatch]:
    """Like ``iter_batches`` but stops quietly at a partial batch at the end (fetch
    responses and crash-torn segment tails may end mid-batch). A complete batch with a bad
    header still raises ``CorruptRecordError``."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    while offset < end:
        if end - offset < BATCH_HEADER_SIZE:
            return
        (batch_length,) = _INT32.unpack_from(mv, offset + 8)
        if batch_length >= 0 and offset + batch_length + LOG_OVERHEAD > end:
            return
        batch = RecordBatch(mv, offset)
        offset += batch.size_in_bytes
        yield batch
