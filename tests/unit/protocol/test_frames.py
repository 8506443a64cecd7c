"""FrameDecoder: split feeds, many frames per feed, size guards, BufferedProtocol path."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import FrameTooLargeError, InvalidFrameSizeError, ProtocolError
from protocol.frames import (
    DIRECT_READ_THRESHOLD,
    INITIAL_FRAME_BYTES,
    MAX_GROWTH_STEP,
    FrameDecoder,
    encode_frame,
)


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
    d.feed(encode_frame(big)[:len(big) + 4 - DIRECT_READ_THRESHOLD])
    assert len(d.get_buffer()) == DIRECT_READ_THRESHOLD


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


def test_buffer_grows_with_arrived_bytes_not_declared_size():
    """A 90 MB announcement with 1 MB sent holds about 1-2 MB, whichever way bytes arrive."""
    declared, sent = 90 * 1024 * 1024, 1024 * 1024
    prefix = struct.pack(">i", declared)
    # BufferedProtocol path, reads of at most 64 KiB
    d = FrameDecoder(max_size=declared)
    assert _drive_buffered(d, prefix + b"x" * sent, chunk=65536) == []
    assert d.pending_frame_size == declared
    assert sent <= d.capacity <= 2 * sent + INITIAL_FRAME_BYTES
    # data_received path, 1 byte then 1000-byte pieces
    d = FrameDecoder(max_size=declared)
    d.feed(prefix)
    assert d.capacity == 0
    for i in range(0, sent, 1000):
        d.feed(b"y" * min(1000, sent - i))
    assert sent <= d.capacity <= 2 * sent


def test_growth_needed_is_what_get_buffer_allocates_and_is_bounded():
    size = 3 * MAX_GROWTH_STEP
    d = FrameDecoder(max_size=size)
    d.feed(struct.pack(">i", size))
    total = 0
    while d.pending_frame_size is not None:
        g = d.growth_needed()
        before = d.capacity
        buf = d.get_buffer()
        assert d.capacity - before == g
        assert g <= MAX_GROWTH_STEP and d.capacity <= size
        assert DIRECT_READ_THRESHOLD <= len(buf) <= size - total
        buf[:] = b"z" * len(buf)
        total += len(buf)
        frames = d.buffer_updated(len(buf))
    assert total == size and len(frames) == 1 and frames[0].nbytes == size
    assert d.capacity == 0 and d.growth_needed() == 0


def test_frugal_read_takes_only_room_or_prefix():
    d = FrameDecoder(max_size=1 << 20)
    assert len(d.get_buffer(frugal=True)) == 4  # a size prefix only
    d.feed(b"\x00\x00")
    assert len(d.get_buffer(frugal=True)) == 2
    d.feed(struct.pack(">h", 100))  # a 100-byte frame: nothing allocated yet
    assert d.room == 0 and d.capacity == 0
    assert len(d.get_buffer(frugal=True)) == 1
    d.feed(b"a" * 10)
    assert d.capacity >= 10 and len(d.get_buffer(frugal=True)) == max(1, d.room)


def test_growth_keeps_received_bytes_when_a_view_is_alive():
    payload = bytes(range(256)) * 1024  # 256 KiB
    stream = encode_frame(payload)
    d = FrameDecoder(max_size=len(payload))
    d.feed(stream[:1000])
    view = d.get_buffer()  # grows, returns the frame's room; keep the view alive
    n = len(view)
    view[:] = stream[1000:1000 + n]
    assert d.buffer_updated(n) == [] and d.room == 0
    # the next growth cannot resize a buffer with a live export: it copies instead
    assert bodies(_drive_buffered(d, stream[1000 + n:], chunk=100_000)) == [payload]
    del view


def test_set_max_size_applies_to_the_next_prefix_and_names_the_limit():
    d = FrameDecoder(max_size=1000)
    d.set_max_size(10, "sasl.server.max.receive.size")
    assert bodies(d.feed(encode_frame(b"0123456789"))) == [b"0123456789"]
    with pytest.raises(FrameTooLargeError, match="sasl.server.max.receive.size"):
        d.feed(encode_frame(b"01234567890"))


def test_shared_scratch_between_decoders():
    scratch = bytearray(1024)
    a, b = FrameDecoder(100, scratch=scratch), FrameDecoder(100, scratch=scratch)
    two = encode_frame(b"two")
    assert _drive_buffered(a, encode_frame(b"one") + two[:6], chunk=5) == [b"one"]
    assert _drive_buffered(b, encode_frame(b"three"), chunk=1024) == [b"three"]
    assert _drive_buffered(a, two[6:], chunk=1) == [b"two"]
