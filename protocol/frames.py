"""Incremental decoder for Kafka's size-prefixed frames (I/O free).

Every Kafka request and response on the wire is one frame::

    size     int32, big-endian: number of bytes that follow (the 4 bytes are not counted)
    payload  `size` bytes: request/response header, then the body

(Kafka protocol guide, "Common Request and Response Structure".) A broker refuses a request
whose size is negative or above ``socket.request.max.bytes`` (default 104857600) as soon as it
has read the 4-byte prefix, without buffering the payload (Kafka's ``InvalidReceiveException``);
this decoder does the same by raising ``InvalidFrameSizeError`` / ``FrameTooLargeError``.

Memory: each frame body is returned in its own ``bytearray`` (writable, so the storage layer
may patch record batch headers in place), wrapped in a ``memoryview``; the decoder keeps no
reference to it afterwards. Buffered bytes are bounded by ``4 + max_size``.

Two ways to feed it:

* ``feed(data)`` with any bytes-like object (copied as needed; ``data`` may be reused by the
  caller afterwards);
* ``get_buffer()`` / ``buffer_updated(nbytes)`` for ``asyncio.BufferedProtocol``: while a large
  frame is being received, ``get_buffer`` hands out the unfilled tail of that frame's own
  buffer, so the socket reads straight into it (no copy); otherwise a reusable scratch buffer.
"""

from __future__ import annotations

import struct

from protocol.errors import FrameTooLargeError, InvalidFrameSizeError

__all__ = ["FrameDecoder", "encode_frame", "SIZE_PREFIX"]

SIZE_PREFIX = struct.Struct(">i")  # int32 frame size, big-endian

#: Remaining bytes of a frame from which ``get_buffer`` receives straight into the frame.
DIRECT_READ_THRESHOLD = 64 * 1024
#: Size of the scratch buffer used for small frames and size prefixes.
SCRATCH_SIZE = 256 * 1024


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Return ``payload`` with its int32 size prefix (for tests and clients)."""
    return SIZE_PREFIX.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Split a byte stream into frame bodies, refusing bad sizes before buffering them.

    ``max_size`` is the largest accepted frame body in bytes (``socket.request.max.bytes``).
    After an error the decoder is poisoned: every later call raises the same error again, so a
    caller that ignores it cannot resynchronise on garbage.
    """

    __slots__ = ("max_size", "_head", "_head_len", "_frame", "_filled", "_error", "_scratch",
                 "_direct")

    def __init__(self, max_size: int) -> None:
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        self.max_size = max_size
        self._head = bytearray(4)  # a size prefix split across feeds
        self._head_len = 0
        self._frame: bytearray | None = None  # body being filled
        self._filled = 0
        self._error: Exception | None = None
        self._scratch: bytearray | None = None
        self._direct = False  # last get_buffer() returned the frame's own buffer

    @property
    def buffered(self) -> int:
        """Bytes received for the frame in progress (prefix included), 0 between frames."""
        if self._frame is not None:
            return 4 + self._filled
        return self._head_len

    @property
    def pending_frame_size(self) -> int | None:
        """Body size of the frame in progress once its prefix is known, else None."""
        return None if self._frame is None else len(self._frame)

    def _check_size(self, size: int) -> None:
        if size < 0:
            self._error = InvalidFrameSizeError(f"invalid frame size {size} (negative)")
            raise self._error
        if size > self.max_size:
            self._error = FrameTooLargeError(
                f"frame size {size} larger than the maximum {self.max_size} "
                "(socket.request.max.bytes)")
            raise self._error

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Consume ``data``; return the frame bodies it completed, in order.

        Raises ``InvalidFrameSizeError`` (size < 0) or ``FrameTooLargeError``
        (size > ``max_size``) as soon as such a prefix is read. Frames completed earlier in the
        same call are lost in that case: the connection is to be closed anyway.
        """
        if self._error is not None:
            raise self._error
        mv = memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        end = len(mv)
        pos = 0
        frames: list[memoryview] = []
        while pos < end:
            frame = self._frame
            if frame is not None:  # filling a body
                take = min(len(frame) - self._filled, end - pos)
                frame[self._filled:self._filled + take] = mv[pos:pos + take]
                self._filled += take
                pos += take
                if self._filled == len(frame):
                    frames.append(memoryview(frame))
                    self._frame = None
                continue
            if self._head_len == 0 and end - pos >= 4:  # fast path: whole prefix here
                (size,) = SIZE_PREFIX.unpack_from(mv, pos)
                self._check_size(size)
                pos += 4
                if end - pos >= size:  # whole body here too
                    frames.append(memoryview(bytearray(mv[pos:pos + size])))
                    pos += size
                else:
                    self._frame = bytearray(size)
                    self._filled = 0
                continue
            take = min(4 - self._head_len, end - pos)
            self._head[self._head_len:self._head_len + take] = mv[pos:pos + take]
            self._head_len += take
            pos += take
            if self._head_len == 4:
                self._head_len = 0
                (size,) = SIZE_PREFIX.unpack_from(self._head, 0)
                self._check_size(size)
                self._frame = bytearray(size)
                self._filled = 0
                if size == 0:
                    frames.append(memoryview(self._frame))
                    self._frame = None
        return frames

    def get_buffer(self) -> memoryview:
        """A writable buffer for the next socket read; pass the count to ``buffer_updated``.

        While at least ``DIRECT_READ_THRESHOLD`` bytes of the current frame are missing this is
        the unfilled tail of the frame's own buffer (exactly that long, so a read never spills
        into the next frame); otherwise a reusable ``SCRATCH_SIZE`` scratch buffer.
        """
        if self._error is not None:
            raise self._error
        frame = self._frame
        if frame is not None and len(frame) - self._filled >= DIRECT_READ_THRESHOLD:
            self._direct = True
            return memoryview(frame)[self._filled:]
        self._direct = False
        if self._scratch is None:
            self._scratch = bytearray(SCRATCH_SIZE)
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """Account for ``nbytes`` written into the last ``get_buffer()``; return completed frames."""
        if self._direct:
            self._direct = False
            frame = self._frame
            assert frame is not None
            self._filled += nbytes
            if self._filled == len(frame):
                self._frame = None
                return [memoryview(frame)]
            return []
        assert self._scratch is not None
        return self.feed(memoryview(self._scratch)[:nbytes])
