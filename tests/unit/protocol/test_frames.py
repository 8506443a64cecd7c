"""FrameDecoder: split feeds, many frames per feed, size guards, BufferedProtocol path."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import FrameTooLargeError, InvalidFrameSizeError, ProtocolError
from protocol.frames import DIRECT_READ_THRESHOLD, FrameDecoder, encode_frame


def bodies(frames):
    return [bytes(f) for f in frames]


def test_encode_frame_prefixes_big_endian_size():
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"


def test_one_frame_in_one_feed():
    d = FrameDecoder(max_size=100)
    assert bodies(d.feed(encode_frame(b"hello"))) == [b"hello"]
    assert d.buffered == 0


def test_many_frames_in_one_feed_in_order():
    payloads = [b"a", b"", b"bb" * 50, b"ccc"]
    d = FrameDecoder(max_size=1000)
    assert bodies(d.feed(b"".join(encode_frame(p) for p in payloads))) == payloads


def test_byte_by_byte_feed_splits_prefix_and_body():
    payloads = [b"first", b"", b"second frame"]
    stream = b"".join(encode_frame(p) for p in payloads)
    d = FrameDecoder(max_size=1000)
    out = []
    for i in range(len(stream)):
        out += bodies(d.feed(stream[i:i + 1]))
        if i == 1:
            assert d.buffered == 2  # half a prefix
    assert out == payloads
    assert d.buffered == 0


def test_buffered_counts_partial_frame():
    d = FrameDecoder(max_size=100)
    assert d.feed(encode_frame(b"0123456789")[:7]) == []
    assert d.buffered == 7
    assert d.pending_frame_size == 10
    assert bodies(d.feed(b"3456789")) == [b"0123456789"]


def test_frames_are_writable_and_independent_of_input():
    data = bytearray(encode_frame(b"xyz") + encode_frame(b"uvw"))
    d = FrameDecoder(max_size=10)
    f1, f2 = d.feed(data)
    data[:] = b"\xff" * len(data)  # caller reuses its buffer
    assert bytes(f1) == b"xyz" and bytes(f2) == b"uvw"
    f1[0] = ord("X")  # storage may patch batches in place
    assert bytes(f1) == b"Xyz"


def test_max_size_is_inclusive():
    d = FrameDecoder(max_size=5)
    assert bodies(d.feed(encode_frame(b"12345"))) == [b"12345"]
    with pytest.raises(FrameTooLargeError) as info:
        d.feed(encode_frame(b"123456"))
    assert "6" in str(info.value) and "5" in str(info.value)
    assert isinstance(info.value, ProtocolError)


def test_oversize_raised_on_prefix_without_buffering():
    d = FrameDecoder(max_size=1024)
    with pytest.raises(FrameTooLargeError):
        d.feed(struct.pack(">i", 2**31 - 1))  # only the prefix: nothing allocated
    assert d.buffered == 0
    with pytest.raises(FrameTooLargeError):  # poisoned: no resync on garbage
        d.feed(encode_frame(b"ok"))


def test_oversize_prefix_split_across_feeds():
    d = FrameDecoder(max_size=1024)
    assert d.feed(b"\x00\x10") == []
    with pytest.raises(FrameTooLargeError):
        d.feed(b"\x00\x01")


def test_negative_size_without_buffering():
    d = FrameDecoder(max_size=1024)
    with pytest.raises(InvalidFrameSizeError):
        d.feed(struct.pack(">i", -1) + b"tail bytes that must not be kept")
    assert d.buffered == 0
    assert d.pending_frame_size is None


def test_negative_size_after_good_frames():
    d = FrameDecoder(max_size=1024)
    with pytest.raises(InvalidFrameSizeError):
        d.feed(encode_frame(b"good") + struct.pack(">i", -7))


def test_negative_max_size_rejected():
    with pytest.raises(ValueError):
        FrameDecoder(max_size=-1)


def test_feed_accepts_non_byte_memoryview():
    d = FrameDecoder(max_size=10)
    raw = encode_frame(b"abcd")
    mv = memoryview(raw[:4] + raw[4:]).cast("c")
    assert bodies(d.feed(mv)) == [b"abcd"]


def _drive_buffered(decoder, stream, chunk):
    """Emulate asyncio's BufferedProtocol: recv_into(get_buffer()) then buffer_updated(n)."""
    out, pos = [], 0
    while pos < len(stream):
        buf = decoder.get_buffer()
        n = min(len(buf), chunk, len(stream) - pos)
        buf[:n] = stream[pos:pos + n]
        pos += n
        out += bodies(decoder.buffer_updated(n))
    return out


def test_buffered_protocol_path_large_frames_read_directly():
    big = bytes(range(256)) * (4 * DIRECT_READ_THRESHOLD // 256)
    payloads = [b"small", big, b"x", big[::-1]]
    stream = b"".join(encode_frame(p) for p in payloads)
    d = FrameDecoder(max_size=len(big))
    assert _drive_buffered(d, stream, chunk=50_000) == payloads
    # a direct buffer is never longer than what the frame still misses
    d.feed(encode_frame(big)[:DIRECT_READ_THRESHOLD])
    assert len(d.get_buffer()) == len(big) + 4 - DIRECT_READ_THRESHOLD


def test_buffered_protocol_path_rejects_oversize():
    d = FrameDecoder(max_size=10)
    buf = d.get_buffer()
    buf[:4] = struct.pack(">i", 11)
    with pytest.raises(FrameTooLargeError):
        d.buffer_updated(4)
    with pytest.raises(FrameTooLargeError):
        d.get_buffer()


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=1, max_value=700), max_size=10),
)
def test_any_split_yields_same_frames(payloads, cuts):
    stream = b"".join(encode_frame(p) for p in payloads)
    d = FrameDecoder(max_size=300)
    out, pos = [], 0
    for c in cuts:
        out += bodies(d.feed(stream[pos:pos + c]))
        pos += c
    out += bodies(d.feed(stream[pos:]))
    assert out == payloads
