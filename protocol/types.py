"""Kafka protocol primitive types (docs/protocol.html, "Protocol Primitive Types").

All integers are big-endian. Readers take a `memoryview` (format "B") and an offset and
return `(value, new_offset)`; writers return `bytes` or append to a `bytearray`.

    INT8/16/32/64, UINT16, UINT32     fixed width, signed unless UINT
    FLOAT64                           IEEE 754 double
    BOOLEAN                           1 byte, 0 = false
    UUID                              16 bytes (uuid.UUID)
    UNSIGNED_VARINT                   LEB128, 7 bits per byte, at most 5 bytes (32 bits)
    VARINT / VARLONG                  zigzag, then LEB128 (at most 5 / 10 bytes)
    STRING / NULLABLE_STRING          int16 length (-1 = null) + UTF-8
    COMPACT_(NULLABLE_)STRING         unsigned varint length + 1 (0 = null) + UTF-8
    BYTES / COMPACT_BYTES             int32 length / unsigned varint length + 1
    ARRAY / COMPACT_ARRAY             int32 count / unsigned varint count + 1
    TAGGED_FIELDS                     uvarint count, then per field: uvarint tag,
                                      uvarint size, size bytes; tags ascending

Malformed input raises `TruncatedError`, `InvalidLengthError` or `InvalidStringError`
(protocol.errors), never IndexError / struct.error.
"""

from __future__ import annotations

import struct
import uuid

from protocol.errors import InvalidLengthError, InvalidStringError, TruncatedError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOLEAN = struct.Struct(">?")

ZERO_UUID = uuid.UUID(int=0)

_UVARINT_CACHE = tuple(
    bytes([i]) if i < 0x80 else bytes([(i & 0x7F) | 0x80, i >> 7]) for i in range(1 << 14)
)


def encode_unsigned_varint(value: int) -> bytes:
    """Unsigned LEB128 encoding of 0 <= value < 2**32."""
    if 0 <= value < 16384:
        return _UVARINT_CACHE[value]
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_unsigned_varint(buf, pos: int) -> tuple[int, int]:
    """Read an unsigned varint (max 5 bytes) at pos -> (value, new_pos)."""
    value = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise TruncatedError("input ends inside a varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift >= 35:
            raise InvalidLengthError("unsigned varint longer than 5 bytes")


def encode_varint(value: int) -> bytes:
    """Zigzag varint (int32)."""
    return encode_unsigned_varint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def decode_varint(buf, pos: int) -> tuple[int, int]:
    raw, pos = decode_unsigned_varint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def encode_varlong(value: int) -> bytes:
    """Zigzag varlong (int64)."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def decode_varlong(buf, pos: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise TruncatedError("input ends inside a varlong")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift >= 70:
            raise InvalidLengthError("varlong longer than 10 bytes")


def _utf8(buf, pos: int, end: int) -> str:
    if end > len(buf):
        raise TruncatedError(f"string of {end - pos} bytes runs past the end of the input")
    try:
        return str(buf[pos:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidStringError(f"invalid UTF-8 in string: {exc.reason}") from None


def decode_string(buf, pos: int, nullable: bool = True) -> tuple[str | None, int]:
    """int16-length (nullable) string."""
    if pos + 2 > len(buf):
        raise TruncatedError("input ends inside a string length")
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise InvalidLengthError(f"invalid string length {n}")
    return _utf8(buf, pos, pos + n), pos + n


def decode_compact_string(buf, pos: int, nullable: bool = True) -> tuple[str | None, int]:
    """uvarint(length + 1) (nullable) string."""
    n, pos = decode_unsigned_varint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise InvalidLengthError("null in a non-nullable compact string")
    n -= 1
    return _utf8(buf, pos, pos + n), pos + n


def encode_string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    b = value.encode("utf-8")
    return INT16.pack(len(b)) + b


def encode_compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    b = value.encode("utf-8")
    return encode_unsigned_varint(len(b) + 1) + b


def decode_tagged_fields(buf, pos: int) -> tuple[dict[int, bytes] | None, int]:
    """Read a tagged-field section, keeping every field raw -> ({tag: bytes} or None, pos)."""
    count, pos = decode_unsigned_varint(buf, pos)
    if count == 0:
        return None, pos
    if count > len(buf) - pos:
        raise InvalidLengthError(f"tagged field count {count} exceeds the remaining bytes")
    fields: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = decode_unsigned_varint(buf, pos)
        size, pos = decode_unsigned_varint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise TruncatedError(f"tagged field {tag} of {size} bytes runs past the end")
        fields[tag] = bytes(buf[pos:end])
        pos = end
    return fields, pos


def encode_tagged_fields(fields: dict[int, bytes] | None, out: bytearray) -> None:
    """Append a tagged-field section of raw fields (sorted by tag) to out."""
    if not fields:
        out.append(0)
        return
    out += encode_unsigned_varint(len(fields))
    for tag in sorted(fields):
        data = fields[tag]
        out += encode_unsigned_varint(tag)
        out += encode_unsigned_varint(len(data))
        out += data
