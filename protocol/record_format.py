"""The magic-v2 record batch format: layout constants, varints and format errors (Kafka docs
implementation.html §5.3.1-5.3.3, KIP-98). Shared by the reader (``protocol.records``), the
builder (``protocol.record_builder``) and the codecs (``protocol.compression``).

Batch layout (big-endian; the CRC-32C covers ``attributes`` to the end of the batch)::

    offset size field
         0    8 baseOffset            int64
         8    4 batchLength           int32  bytes after this field (size - 12)
        12    4 partitionLeaderEpoch  int32
        16    1 magic                 int8   = 2
        17    4 crc                   uint32 CRC-32C of bytes [21, size)
        21    2 attributes            int16  bits 0-2 codec, 3 timestamp type, 4 transactional,
                                             5 control, 6 delete horizon
        23    4 lastOffsetDelta       int32
        27    8 baseTimestamp         int64  ms (first record's timestamp)
        35    8 maxTimestamp          int64  ms
        43    8 producerId            int64
        51    2 producerEpoch         int16
        53    4 baseSequence          int32
        57    4 recordsCount          int32
        61    - records               compressed together when codec != 0

Record layout (varint = zigzag base-128, as protobuf)::

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
    headersCount varint, [headerKeyLength varint, headerKey utf-8,
                          headerValueLength varint (-1 = null), headerValue]*

Control records (transaction markers) have key ``version int16, type int16`` (0 abort,
1 commit) and value ``version int16, coordinatorEpoch int32``.

Malformed input raises ``CorruptRecordError`` (``CORRUPT_MESSAGE``); semantically invalid
records (e.g. a control batch without a valid marker) raise ``InvalidRecordError``
(``INVALID_RECORD``).
"""

from __future__ import annotations

import struct

from protocol.errors import ErrorCode, KafkaError

__all__ = [
    "ATTRIBUTES_OFFSET", "BATCH_HEADER", "BATCH_HEADER_SIZE", "COMPRESSION_MASK",
    "CONTROL_ABORT", "CONTROL_COMMIT", "CONTROL_KEY", "CONTROL_MASK", "CONTROL_VALUE",
    "CREATE_TIME", "CRC_OFFSET", "CorruptRecordError", "DELETE_HORIZON_MASK",
    "InvalidRecordError", "LOG_APPEND_TIME", "LOG_OVERHEAD", "MAGIC_OFFSET", "MAGIC_V2",
    "MAX_TIMESTAMP_OFFSET", "NO_TIMESTAMP", "TIMESTAMP_TYPE_MASK", "TRANSACTIONAL_MASK",
    "UINT32", "encode_varint", "read_varint",
]


class CorruptRecordError(KafkaError):
    """A batch or record that cannot be parsed or fails its CRC (``CORRUPT_MESSAGE``)."""

    def __init__(self, message: str | None = None):
        super().__init__(ErrorCode.CORRUPT_MESSAGE, message)


class InvalidRecordError(KafkaError):
    """A well-formed record that breaks a rule of the format (``INVALID_RECORD``)."""

    def __init__(self, message: str | None = None):
        super().__init__(ErrorCode.INVALID_RECORD, message)


MAGIC_V2 = 2

BATCH_HEADER = struct.Struct(
    ">"
    "q"  # baseOffset: offset of the first record
    "i"  # batchLength: bytes from partitionLeaderEpoch to the end of the batch
    "i"  # partitionLeaderEpoch: set by the leader on append (outside the CRC)
    "b"  # magic: 2
    "I"  # crc: CRC-32C over attributes .. end of batch
    "h"  # attributes: codec | timestampType<<3 | transactional<<4 | control<<5 | horizon<<6
    "i"  # lastOffsetDelta: offset of the last record minus baseOffset
    "q"  # baseTimestamp: ms
    "q"  # maxTimestamp: ms (the log append time for LogAppendTime batches)
    "q"  # producerId: -1 if not idempotent
    "h"  # producerEpoch: -1 if not idempotent
    "i"  # baseSequence: -1 if not idempotent
    "i"  # recordsCount
)
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers [21, end)
MAX_TIMESTAMP_OFFSET = 35

UINT32 = struct.Struct(">I")
CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_TIMESTAMP = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1


# --- varints --------------------------------------------------------------------------------


def read_varint(buf, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos``; returns ``(value, new_pos)``.

    ``max_bytes`` is 5 for int32 varints and 10 for varlongs; longer or truncated encodings
    raise ``CorruptRecordError``.
    """
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise CorruptRecordError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise CorruptRecordError("varint too long")


def encode_varint(value: int, out: bytearray) -> None:
    """Append the zigzag varint/varlong encoding of ``value`` (int64 range) to ``out``."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
