"""Legacy message sets, magic v0 and v1 (Kafka docs implementation.html §5.3.4, KIP-31/32).

A message set is a sequence of entries (big-endian)::

    offset       int64
    message_size int32   bytes after this field
    crc          uint32  CRC-32 (IEEE, zlib.crc32) of magic .. end of message
    magic        int8    0 or 1
    attributes   int8    bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 timestamp
                         type (v1 only: 0 CreateTime, 1 LogAppendTime)
    timestamp    int64   ms, v1 only
    key          int32 length (-1 = null) + bytes
    value        int32 length (-1 = null) + bytes

A compressed message is a *wrapper*: its value is the compressed bytes of an inner message
set. Inner offsets are absolute in v0; in v1 they are relative (0..n-1) and the wrapper's
offset is the absolute offset of the last inner message (KIP-31). Wrappers never nest.

LZ4 in magic 0 carries the frame-header checksum as Kafka before 0.10 computed it, over the
4-byte frame magic too (KAFKA-3160); it is repaired before decoding and reproduced when
encoding magic 0.

Errors: malformed input or a CRC mismatch raises ``CorruptRecordError`` (``CORRUPT_MESSAGE``);
zstd, which old formats cannot carry, raises ``KafkaError(UNSUPPORTED_COMPRESSION_TYPE)``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from protocol import compression
from protocol.errors import ErrorCode, KafkaError
from protocol.record_builder import RecordBatchBuilder
from protocol.record_format import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, CorruptRecordError
from protocol.records import iter_batches_lenient

MESSAGE_HEADER = struct.Struct(
    ">"
    "q"  # offset
    "i"  # message_size: bytes after this field
    "I"  # crc: CRC-32 of magic .. end
    "b"  # magic: 0 or 1
    "b"  # attributes: codec | timestampType << 3
)
LOG_OVERHEAD = 12  # offset + message_size
CRC_START = 16  # the CRC covers from the magic byte
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")

#: Smallest message_size: crc, magic, attributes, key and value lengths (+ timestamp in v1).
MIN_MESSAGE_SIZE = {0: 14, 1: 22}
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08


class LegacyMessage(NamedTuple):
    """One (inner) message; ``timestamp`` is -1 for magic 0."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    magic: int = 0
    attributes: int = 0

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic > 0 and self.attributes & TIMESTAMP_TYPE_MASK:
            return LOG_APPEND_TIME
        return CREATE_TIME


# --- LZ4 frame header checksum (xxHash32 of the frame descriptor, LZ4 frame spec) ----------

_M32 = 0xFFFFFFFF
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32_short(data: bytes) -> int:
    """xxHash32 (seed 0) of fewer than 16 bytes: all a frame descriptor needs."""
    h = (_P5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        h = (h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        i += 4
    for b in data[i:]:
        h = (h + b * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def _lz4_header_checksum_pos(frame: bytes) -> int:
    if len(frame) < 7 or frame[:4] != b"\x04\x22\x4d\x18":
        raise CorruptRecordError("not an lz4 frame")
    flg = frame[4]
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if pos >= len(frame):
        raise CorruptRecordError("truncated lz4 frame header")
    return pos


def _lz4_set_header_checksum(frame: bytes, kafka_v0: bool) -> bytes:
    """Rewrite the header checksum: correct one, or Kafka's magic-0 one if ``kafka_v0``."""
    pos = _lz4_header_checksum_pos(frame)
    covered = frame[:pos] if kafka_v0 else frame[4:pos]
    hc = (_xxh32_short(covered) >> 8) & 0xFF
    return frame[:pos] + bytes([hc]) + frame[pos + 1 :]


def _decompress(codec: int, magic: int, data: bytes, max_size: int) -> bytes:
    if codec == compression.ZSTD:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs magic v2")
    if codec == compression.LZ4 and magic == 0:
        data = _lz4_set_header_checksum(bytes(data), kafka_v0=False)
    return compression.decompress(codec, data, max_size)


def _compress(codec: int, magic: int, data: bytes) -> bytes:
    if codec == compression.ZSTD:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs magic v2")
    out = compression.compress(codec, data)
    if codec == compression.LZ4 and magic == 0:
        out = _lz4_set_header_checksum(out, kafka_v0=True)
    return out


# --- decoding ------------------------------------------------------------------------------


def _read_bytes(mv: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError("truncated message key/value length")
    (n,) = _INT32.unpack_from(mv, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise CorruptRecordError(f"invalid key/value length {n}")
        return None, pos
    if pos + n > end:
        raise CorruptRecordError("message key/value runs past the end of the message")
    return bytes(mv[pos : pos + n]), pos + n


def iter_legacy_entries(
    buf, offset: int = 0, *, allow_partial_tail: bool = False, verify_crc: bool = True
) -> Iterator[LegacyMessage]:
    """Yield the top-level entries of a message set (wrappers not expanded).

    A short last entry raises ``CorruptRecordError`` unless ``allow_partial_tail`` (fetch
    responses may end mid-message), in which case iteration just stops.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    pos = offset
    while pos < end:
        if end - pos < MESSAGE_HEADER.size:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"truncated message header ({end - pos} bytes)")
        msg_offset, size, crc, magic, attributes = MESSAGE_HEADER.unpack_from(mv, pos)
        if magic not in (0, 1):
            raise CorruptRecordError(f"unsupported message magic {magic}")
        if size < MIN_MESSAGE_SIZE[magic]:
            raise CorruptRecordError(f"message size {size} too small for magic {magic}")
        msg_end = pos + LOG_OVERHEAD + size
        if msg_end > end:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"message of {size} bytes is truncated")
        if verify_crc:
            computed = zlib.crc32(mv[pos + CRC_START : msg_end])
            if computed != crc:
                raise CorruptRecordError(
                    f"message CRC mismatch at offset {msg_offset}: stored {crc:#010x}, "
                    f"computed {computed:#010x}"
                )
        p = pos + MESSAGE_HEADER.size
        timestamp = NO_TIMESTAMP
        if magic == 1:
            (timestamp,) = _INT64.unpack_from(mv, p)
            p += 8
        key, p = _read_bytes(mv, p, msg_end)
        value, p = _read_bytes(mv, p, msg_end)
        if p != msg_end:
            raise CorruptRecordError(f"message has {msg_end - p} unread bytes")
        yield LegacyMessage(msg_offset, timestamp, key, value, magic, attributes)
        pos = msg_end


def iter_legacy_messages(
    buf,
    offset: int = 0,
    *,
    allow_partial_tail: bool = False,
    verify_crc: bool = True,
    max_decompressed_size: int = compression.DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[LegacyMessage]:
    """Yield every message of a v0/v1 message set, expanding compressed wrappers.

    Inner messages get absolute offsets; in v1 wrappers with LogAppendTime they take the
    wrapper's timestamp. A wrapper inside a wrapper raises ``CorruptRecordError``.
    """
    for entry in iter_legacy_entries(
        buf, offset, allow_partial_tail=allow_partial_tail, verify_crc=verify_crc
    ):
        codec = entry.compression_type
        if codec == compression.NONE:
            yield entry
            continue
        if entry.value is None:
            raise CorruptRecordError("compressed wrapper message without a value")
        inner_set = _decompress(codec, entry.magic, entry.value, max_decompressed_size)
        inner = list(iter_legacy_entries(inner_set, verify_crc=verify_crc))
        if not inner:
            raise CorruptRecordError("compressed wrapper message with no inner messages")
        shift = entry.offset - inner[-1].offset if entry.magic == 1 else 0
        log_append = entry.timestamp_type == LOG_APPEND_TIME
        for msg in inner:
            if msg.compression_type != compression.NONE:
                raise CorruptRecordError("nested compressed message")
            if msg.magic != entry.magic:
                raise CorruptRecordError("inner message magic differs from its wrapper's")
            yield msg._replace(
                offset=msg.offset + shift,
                timestamp=entry.timestamp if log_append else msg.timestamp,
            )


# --- encoding ------------------------------------------------------------------------------


def encode_message(
    magic: int, offset: int, timestamp: int, key, value, attributes: int = 0
) -> bytes:
    """Encode one message-set entry (offset, size, CRC, message)."""
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    body = bytearray(MESSAGE_HEADER.pack(offset, 0, 0, magic, attributes))
    if magic == 1:
        body += _INT64.pack(timestamp)
    for data in (key, value):
        if data is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(data))
            body += data
    _INT32.pack_into(body, 8, len(body) - LOG_OVERHEAD)
    _UINT32.pack_into(body, 12, zlib.crc32(memoryview(body)[CRC_START:]))
    return bytes(body)


def _as_message(m) -> tuple[int, int, bytes | None, bytes | None]:
    if isinstance(m, LegacyMessage):
        return m.offset, m.timestamp, m.key, m.value
    offset, timestamp, key, value = m
    return offset, timestamp, key, value


def build_message_set(
    magic: int,
    messages: Iterable,
    compression_type: int = 0,
    timestamp_type: int = CREATE_TIME,
) -> bytes:
    """Encode messages (``LegacyMessage`` or ``(offset, timestamp, key, value)``) as a v0/v1
    message set, offsets as given. With a codec, all messages go into one wrapper whose
    offset is the last message's; v1 inner offsets are then relative (0..n-1) and the
    wrapper's timestamp is the largest inner one."""
    msgs = [_as_message(m) for m in messages]
    ts_attr = TIMESTAMP_TYPE_MASK if magic == 1 and timestamp_type == LOG_APPEND_TIME else 0
    if compression_type == compression.NONE:
        return b"".join(
            encode_message(magic, o, ts if magic else NO_TIMESTAMP, k, v, ts_attr)
            for o, ts, k, v in msgs
        )
    if not msgs:
        return b""
    inner = b"".join(
        encode_message(magic, i if magic == 1 else o, ts if magic else NO_TIMESTAMP, k, v)
        for i, (o, ts, k, v) in enumerate(msgs)
    )
    wrapper_ts = max(ts for _, ts, _, _ in msgs) if magic == 1 else NO_TIMESTAMP
    return encode_message(
        magic,
        msgs[-1][0],
        wrapper_ts,
        None,
        _compress(compression_type, magic, inner),
        compression_type | ts_attr,
    )


# --- conversion ----------------------------------------------------------------------------


def convert_to_v2(
    buf,
    *,
    compression_type: int | None = None,
    base_offset: int = 0,
    max_decompressed_size: int = compression.DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """Up-convert a produced v0/v1 message set to one magic-v2 batch (no producer id).

    Offsets become ``base_offset + i`` (the log assigns real ones). The codec is the first
    wrapper's unless ``compression_type`` is given; magic 0 timestamps become -1. An empty
    message set gives ``b""``.
    """
    entries = list(iter_legacy_entries(buf))
    if compression_type is None:
        compression_type = next(
            (e.compression_type for e in entries if e.compression_type), compression.NONE
        )
    builder = RecordBatchBuilder(compression_type=compression_type, base_offset=base_offset)
    for msg in iter_legacy_messages(buf, max_decompressed_size=max_decompressed_size):
        builder.append(msg.timestamp if msg.magic else NO_TIMESTAMP, msg.key, msg.value)
    if not len(builder):
        return b""
    return builder.build()


def convert_from_v2(
    buf,
    magic: int,
    *,
    max_decompressed_size: int = compression.DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """Down-convert v2 batches (e.g. a fetch's log slice) to a v0/v1 message set.

    Per batch: uncompressed records become plain messages with their absolute offsets;
    a compressed batch becomes one wrapper of the same codec. Control batches are dropped,
    record headers are lost, a partial batch at the end is ignored. zstd batches raise
    ``KafkaError(UNSUPPORTED_COMPRESSION_TYPE)`` (Kafka answers old fetches that way).
    """
    parts = []
    for batch in iter_batches_lenient(buf):
        if batch.is_control:
            continue
        codec = batch.compression_type
        if codec == compression.ZSTD:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                "zstd batches cannot be down-converted for magic < 2",
            )
        msgs = [
            (r.offset, r.timestamp, r.key, r.value)
            for r in batch.iter_records(max_decompressed_size)
        ]
        parts.append(build_message_set(magic, msgs, codec, batch.timestamp_type))
    return b"".join(parts)
