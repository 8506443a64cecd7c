"""Building magic-v2 record batches: ``RecordBatchBuilder``, ``build_control_batch``,
``encode_record`` (layouts in ``protocol.record_format``; Kafka docs implementation.html
§5.3.1-5.3.3, KIP-98 for control batches). Reading them back: ``protocol.records``.
"""

from __future__ import annotations

from collections.abc import Iterable

import crc32c

from protocol import compression
from protocol.record_format import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_KEY,
    CONTROL_MASK,
    CONTROL_VALUE,
    CRC_OFFSET,
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    UINT32,
    encode_varint,
)

__all__ = ["RecordBatchBuilder", "build_control_batch", "encode_record"]


def _append_bytes(out: bytearray, data) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        encode_varint(len(data), out)
        out += data


def encode_record(
    offset_delta: int, timestamp_delta: int, key, value, headers=(), attributes: int = 0
) -> bytearray:
    """Encode one record (with its length prefix)."""
    body = bytearray()
    body.append(attributes & 0xFF)
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    _append_bytes(body, key)
    _append_bytes(body, value)
    encode_varint(len(headers), body)
    for hkey, hvalue in headers:
        _append_bytes(body, hkey.encode("utf-8") if isinstance(hkey, str) else hkey)
        _append_bytes(body, hvalue)
    out = bytearray()
    encode_varint(len(body), out)
    out += body
    return out


class RecordBatchBuilder:
    """Build one magic-v2 batch (for internal topics, control markers, tests, conversion).

    ``append`` takes the timestamp (ms; -1 for none), key and value (bytes-like or None) and
    headers (``(str, bytes | None)`` pairs); offsets are ``base_offset + i``. ``build()``
    returns the batch bytes with the CRC filled in; the base timestamp is the first record's.
    """

    def __init__(
        self,
        compression_type: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
        timestamp_type: int = CREATE_TIME,
    ):
        self.compression_type = compression_type
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.timestamp_type = timestamp_type
        self._records = bytearray()
        self._count = 0
        self._base_timestamp: int | None = None
        self._max_timestamp = NO_TIMESTAMP

    def __len__(self) -> int:
        return self._count

    def append(self, timestamp: int, key, value, headers: Iterable = ()) -> int:
        """Add a record; returns its offset."""
        headers = list(headers)
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
        self._max_timestamp = max(self._max_timestamp, timestamp)
        self._records += encode_record(
            self._count, timestamp - self._base_timestamp, key, value, headers
        )
        self._count += 1
        return self.base_offset + self._count - 1

    @property
    def attributes(self) -> int:
        a = self.compression_type & COMPRESSION_MASK
        if self.timestamp_type == LOG_APPEND_TIME:
            a |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            a |= TRANSACTIONAL_MASK
        if self.is_control:
            a |= CONTROL_MASK
        return a

    def build(self) -> bytes:
        if self._count == 0:
            raise ValueError("a record batch needs at least one record")
        payload = compression.compress(self.compression_type, self._records)
        out = bytearray(BATCH_HEADER_SIZE + len(payload))
        BATCH_HEADER.pack_into(
            out,
            0,
            self.base_offset,
            len(out) - LOG_OVERHEAD,
            self.partition_leader_epoch,
            MAGIC_V2,
            0,  # crc, filled below
            self.attributes,
            self._count - 1,
            self._base_timestamp,
            self._max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self._count,
        )
        out[BATCH_HEADER_SIZE:] = payload
        UINT32.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
        return bytes(out)


def build_control_batch(
    marker: str,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Build a transaction marker batch (``marker`` is ``"commit"`` or ``"abort"``).

    Transactional + control attributes, one record with key ``(version 0, type)`` and value
    ``(version 0, coordinator_epoch)``, as WriteTxnMarkers appends them (KIP-98).
    """
    if marker not in ("commit", "abort"):
        raise ValueError(f"marker must be 'commit' or 'abort', not {marker!r}")
    ctype = CONTROL_COMMIT if marker == "commit" else CONTROL_ABORT
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(
        timestamp, CONTROL_KEY.pack(0, ctype), CONTROL_VALUE.pack(0, coordinator_epoch)
    )
    return builder.build()
