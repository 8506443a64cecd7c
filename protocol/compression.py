"""Compression codecs for record batches (attributes bits 0-2).

Codec ids follow Kafka (implementation.html §5.3.1, KIP-110 for zstd):

    0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd

Wire forms, decoded leniently and encoded the way the Java client writes them:

- gzip: RFC 1952 members (``zlib`` with gzip wrapping). Concatenated members are accepted.
- snappy: either one raw snappy block (librdkafka sends this) or the xerial framing used by
  the Java client (``snappy-java``'s ``SnappyOutputStream``) and kafka-python/aiokafka:
  ``\\x82SNAPPY\\x00`` + int32 version + int32 min-compatible version, then
  ``[int32 block length, raw snappy block]*``. ``compress`` writes xerial framing, which every
  client decodes.
- lz4: the LZ4 frame format (KIP-57) with independent 64 KiB blocks and no content size, as
  Kafka's ``KafkaLZ4BlockOutputStream`` writes it.
- zstd: zstd frames; frames without a content size are decoded by streaming.

Every ``decompress`` is bounded by ``max_size`` bytes of output: a larger result (a
decompression bomb or a corrupt length) raises ``CorruptRecordError`` (``CORRUPT_MESSAGE``)
before more than about ``max_size`` bytes are held in memory. Malformed input raises
``CorruptRecordError``; an unknown codec id raises ``KafkaError(UNSUPPORTED_COMPRESSION_TYPE)``.
"""

from __future__ import annotations

import io
import struct
import zlib

import lz4.frame
import snappy
import zstandard

from protocol.errors import ErrorCode, KafkaError
from protocol.record_format import CorruptRecordError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

#: Default bound on the decompressed size of one batch payload (bytes).
DEFAULT_MAX_DECOMPRESSED_SIZE = 128 * 1024 * 1024

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, min compatible version
_XERIAL_BLOCK = 32 * 1024  # uncompressed bytes per xerial block (snappy-java default)
_INT32 = struct.Struct(">i")
_READ_CHUNK = 64 * 1024

_zstd_compressor = zstandard.ZstdCompressor(level=3)
_zstd_decompressor = zstandard.ZstdDecompressor()


def _corrupt(message: str) -> Exception:
    return CorruptRecordError(message)


def _unsupported(codec: int) -> KafkaError:
    return KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress ``data`` (bytes-like) with ``codec``; ``codec`` 0 returns the bytes unchanged."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        return _xerial_encode(data)
    if codec == LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == ZSTD:
        if level is not None:
            return zstandard.ZstdCompressor(level=level).compress(data)
        return _zstd_compressor.compress(data)
    raise _unsupported(codec)


def decompress(codec: int, data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress ``data``; raises ``CorruptRecordError`` if malformed or > ``max_size`` bytes."""
    if codec == NONE:
        if len(data) > max_size:
            raise _corrupt(f"payload of {len(data)} bytes exceeds {max_size}")
        return bytes(data)
    try:
        if codec == GZIP:
            return _gzip_decompress(data, max_size)
        if codec == SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == LZ4:
            return _lz4_decompress(data, max_size)
        if codec == ZSTD:
            return _zstd_decompress(data, max_size)
    except (zlib.error, snappy.UncompressError, zstandard.ZstdError, RuntimeError, ValueError) as e:
        raise _corrupt(f"{CODEC_NAMES[codec]} decompression failed: {e}") from None
    raise _unsupported(codec)


def _check_size(size: int, max_size: int, codec: str) -> None:
    if size > max_size:
        raise _corrupt(f"{codec} payload decompresses to more than {max_size} bytes")


def _gzip_decompress(data, max_size: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(47)  # 32 + 15: gzip or zlib header, auto-detected
        chunk = d.decompress(rest, max_size + 1 - len(out))
        out += chunk
        _check_size(len(out), max_size, "gzip")
        if not d.eof:
            if d.unconsumed_tail:
                raise _corrupt(f"gzip payload decompresses to more than {max_size} bytes")
            raise _corrupt("truncated gzip payload")
        rest = d.unused_data
        if not rest.strip(b"\x00"):
            return bytes(out)


def _snappy_raw_length(block) -> int:
    """Read the uncompressed length (unsigned little-endian base-128 varint) of a raw block."""
    result = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        result |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return result
    raise _corrupt("bad snappy block length")


def _snappy_block(block, max_size: int) -> bytes:
    _check_size(_snappy_raw_length(block), max_size, "snappy")
    return snappy.decompress(bytes(block))


def _snappy_decompress(data, max_size: int) -> bytes:
    mv = memoryview(data)
    if bytes(mv[:8]) != _XERIAL_MAGIC:
        return _snappy_block(mv, max_size)
    if len(mv) < _XERIAL_HEADER.size:
        raise _corrupt("truncated xerial snappy header")
    pos = _XERIAL_HEADER.size
    out = bytearray()
    while pos < len(mv):
        if pos + 4 > len(mv):
            raise _corrupt("truncated xerial snappy block length")
        (n,) = _INT32.unpack_from(mv, pos)
        pos += 4
        if n < 0 or pos + n > len(mv):
            raise _corrupt(f"bad xerial snappy block length {n}")
        out += _snappy_block(mv[pos : pos + n], max_size - len(out))
        pos += n
    return bytes(out)


def _xerial_encode(data) -> bytes:
    mv = memoryview(data)
    parts = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(mv), _XERIAL_BLOCK):
        block = snappy.compress(bytes(mv[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_decompress(data, max_size: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(bytes(data), max_length=max_size + 1)
    _check_size(len(out), max_size, "lz4")
    if not d.eof:
        if d.needs_input:
            raise _corrupt("truncated lz4 frame")
        raise _corrupt(f"lz4 payload decompresses to more than {max_size} bytes")
    return out


def _zstd_decompress(data, max_size: int) -> bytes:
    data = bytes(data)
    _check_zstd_frames_complete(data)
    out = bytearray()
    with _zstd_decompressor.stream_reader(io.BytesIO(data), read_across_frames=True) as r:
        while True:
            chunk = r.read(min(_READ_CHUNK, max_size + 1 - len(out)))
            if not chunk:
                break
            out += chunk
            _check_size(len(out), max_size, "zstd")
    return bytes(out)


_ZSTD_MAGIC = 0xFD2FB528
_UINT32_LE = struct.Struct("<I")


def _check_zstd_frames_complete(data: bytes) -> None:
    """Walk frame and block headers (RFC 8878 §3.1) so a truncated frame is an error: the
    streaming decoder would otherwise return a silent prefix."""
    pos, end = 0, len(data)
    if end == 0:
        raise _corrupt("empty zstd payload")
    while pos < end:
        if end - pos < 4:
            raise _corrupt("truncated zstd frame magic")
        (magic,) = _UINT32_LE.unpack_from(data, pos)
        pos += 4
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if end - pos < 4:
                raise _corrupt("truncated zstd skippable frame")
            pos += 4 + _UINT32_LE.unpack_from(data, pos)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise _corrupt("not a zstd frame")
        if pos >= end:
            raise _corrupt("truncated zstd frame header")
        fhd = data[pos]
        single_segment = fhd & 0x20
        fcs_size = (0, 2, 4, 8)[fhd >> 6] or (1 if single_segment else 0)
        pos += 1 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 0x03] + fcs_size
        while True:
            if end - pos < 3:
                raise _corrupt("truncated zstd block header")
            header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            pos += 3
            block_type = (header >> 1) & 0x03
            if block_type == 3:
                raise _corrupt("reserved zstd block type")
            pos += 1 if block_type == 1 else header >> 3
            if header & 1:
                break
        if fhd & 0x04:
            pos += 4  # content checksum
        if pos > end:
            raise _corrupt("truncated zstd frame")
