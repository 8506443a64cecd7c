"""Compression codecs: round trips, the wire variants clients send, bounds, bad input."""

import gzip
import io
import os
import struct
import warnings

import lz4.frame
import pytest
import snappy
import zstandard

from protocol import compression
from protocol.compression import compress, decompress
from protocol.errors import ErrorCode, KafkaError
from protocol.record_format import CorruptRecordError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import codec as kp_codec

DATA = b"".join(b"record-%d;" % i for i in range(20_000)) + os.urandom(3000)
CODECS = [0, 1, 2, 3, 4]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", DATA], ids=["empty", "one", "large"])
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_memoryview_and_bytearray(codec):
    packed = compress(codec, memoryview(DATA))
    assert decompress(codec, bytearray(packed)) == DATA
    assert decompress(codec, memoryview(packed)) == DATA


def test_gzip_is_a_gzip_member_and_concatenated_members_decode():
    packed = compress(1, DATA)
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == DATA
    assert decompress(1, gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"


def test_snappy_raw_and_xerial_forms():
    raw = snappy.compress(DATA)
    assert decompress(2, raw) == DATA
    xerial = compress(2, DATA)
    assert xerial.startswith(b"\x82SNAPPY\x00")
    assert struct.unpack_from(">ii", xerial, 8) == (1, 1)
    # kafka-python (and the Java client) write xerial framing; both directions work
    assert kp_codec.snappy_decode(xerial) == DATA
    assert decompress(2, kp_codec.snappy_encode(DATA, xerial_compatible=True)) == DATA
    assert decompress(2, kp_codec.snappy_encode(DATA, xerial_compatible=False)) == DATA


def test_lz4_frames_with_linked_blocks_and_content_size_decode():
    for kw in ({}, {"block_linked": True, "store_size": True, "content_checksum": True}):
        assert decompress(3, lz4.frame.compress(DATA, **kw)) == DATA
    # what Kafka's KafkaLZ4BlockOutputStream writes: independent blocks, no content size
    packed = compress(3, DATA)
    flg = packed[4]
    assert flg & 0x20  # block independence
    assert not flg & 0x08  # no content size
    assert kp_codec.lz4_decode(packed) == DATA


def test_zstd_without_content_size_decodes_by_streaming():
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    out = io.BytesIO()
    with cctx.stream_writer(out, closefd=False) as w:
        w.write(DATA)
    packed = out.getvalue()
    assert zstandard.get_frame_parameters(packed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(4, packed) == DATA
    assert kp_codec.zstd_decode(compress(4, DATA)) == DATA


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bombs_are_bounded(codec):
    bomb = compress(codec, b"\x00" * (8 * 1024 * 1024))
    assert len(bomb) < 1024 * 1024
    with pytest.raises(CorruptRecordError):
        decompress(codec, bomb, max_size=1024 * 1024)
    assert len(decompress(codec, bomb, max_size=8 * 1024 * 1024)) == 8 * 1024 * 1024


def test_uncompressed_payload_respects_bound():
    with pytest.raises(CorruptRecordError):
        decompress(0, b"x" * 11, max_size=10)


def test_raw_snappy_with_huge_declared_length_is_refused_before_decoding():
    block = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10  # declares 4 GiB
    with pytest.raises(CorruptRecordError):
        decompress(2, block, max_size=1 << 20)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_truncated_input_is_corrupt(codec):
    packed = compress(codec, DATA)
    for cut in (1, 7, len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[: len(packed) - cut])


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_is_corrupt(codec):
    for garbage in (b"\x01", b"hello world, not compressed", os.urandom(200)):
        with pytest.raises(CorruptRecordError):
            decompress(codec, garbage)


def test_bad_xerial_block_length():
    header = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    with pytest.raises(CorruptRecordError):
        decompress(2, header + struct.pack(">i", 1000) + b"abc")
    with pytest.raises(CorruptRecordError):
        decompress(2, header + b"\x00\x00")
    assert decompress(2, header) == b""


def test_unknown_codec():
    for fn in (lambda: compress(5, b"x"), lambda: decompress(7, b"x")):
        with pytest.raises(KafkaError) as e:
            fn()
        assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_codec_names():
    assert compression.CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def test_zstd_concatenated_and_skippable_frames():
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"abc"
    packed = compress(4, b"first-") + skippable + compress(4, b"second")
    assert decompress(4, packed) == b"first-second"
    with pytest.raises(CorruptRecordError):
        decompress(4, compress(4, b"first-") + b"\x28\xb5")
