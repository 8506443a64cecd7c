"""Incremental decoder for Kafka's size-prefixed frames (I/O free).

Every Kafka request and response on the wire is one frame::

    size     int32, big-endian: number of bytes that follow (the 4 bytes are not counted)
    payload  `size` bytes: request/response header, then the body

(Kafka protocol guide, "Common Request and Response Structure".) A broker refuses a request
whose size is negative or above ``socket.request.max.bytes`` (default 104857600) as soon as it
has read the 4-byte prefix, without buffering the payload (Kafka's ``InvalidReceiveException``);
this decoder does the same by raising ``InvalidFrameSizeError`` / ``FrameTooLargeError``.

Memory: a frame's buffer grows with the bytes that actually arrive, never with the declared
size alone: a peer that announces 90 MB and sends 1 MB makes the decoder hold about 1-2 MB.
The buffer starts empty when the prefix is read; ``get_buffer`` grows it (doubling, at least
``INITIAL_FRAME_BYTES`` of room, at most ``MAX_GROWTH_STEP`` per step, never past the declared
size) only when a direct read is due, and ``feed`` grows it to hold what it copies. So the
memory held is at most about twice the bytes received, plus one step. ``growth_needed()``
tells a caller that accounts memory (the broker's ``queued.max.request.bytes`` pool) what the
next ``get_buffer`` will allocate, ``capacity`` what the frame in progress holds, ``room`` what
the next read may take without allocating. Each completed frame body is returned in its own
``bytearray`` of exactly its size (writable, so the storage layer may patch record batch
headers in place), wrapped in a ``memoryview``; the decoder keeps no reference to it.

Two ways to feed it:

* ``feed(data)`` with any bytes-like object (copied as needed; ``data`` may be reused by the
  caller afterwards);
* ``get_buffer()`` / ``buffer_updated(nbytes)`` for ``asyncio.BufferedProtocol``: while a large
  frame is being received, ``get_buffer`` hands out the unfilled room of that frame's own
  buffer, so the socket reads straight into it (no copy); otherwise a scratch buffer, which
  may be shared by many decoders of one thread (``scratch=``): its bytes are copied out in the
  ``buffer_updated`` call that follows the read.
"""

from __future__ import annotations

import struct

from protocol.errors import FrameTooLargeError, InvalidFrameSizeError

__all__ = ["FrameDecoder", "encode_frame", "SIZE_PREFIX", "new_scratch"]

SIZE_PREFIX = struct.Struct(">i")  # int32 frame size, big-endian

#: Remaining bytes of a frame from which ``get_buffer`` receives straight into the frame.
DIRECT_READ_THRESHOLD = 64 * 1024
#: Size of the scratch buffer used for small frames and size prefixes.
SCRATCH_SIZE = 256 * 1024
#: Room a frame buffer gets at least when it grows for a direct read (>= DIRECT_READ_THRESHOLD).
INITIAL_FRAME_BYTES = 64 * 1024
#: Most bytes one growth step adds to a frame buffer.
MAX_GROWTH_STEP = 16 * 1024 * 1024


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Return ``payload`` with its int32 size prefix (for tests and clients)."""
    return SIZE_PREFIX.pack(len(payload)) + bytes(payload)


def new_scratch() -> bytearray:
    """A scratch buffer to share among the decoders of one thread (``FrameDecoder(scratch=)``)."""
    return bytearray(SCRATCH_SIZE)


_ZEROS = memoryview(bytes(MAX_GROWTH_STEP))


def _grown(frame: bytearray, filled: int, new_capacity: int) -> bytearray:
    """``frame`` resized to ``new_capacity`` bytes keeping its first ``filled`` bytes (in place
    when no view of it is alive, which lets the allocator remap instead of copying)."""
    try:
        frame += _ZEROS[:new_capacity - len(frame)]
        return frame
    except BufferError:  # a memoryview of it is still alive: copy into a new buffer
        new = bytearray(new_capacity)
        new[:filled] = memoryview(frame)[:filled]
        return new


class FrameDecoder:
    """Split a byte stream into frame bodies, refusing bad sizes before buffering them.

    ``max_size`` is the largest accepted frame body in bytes (``socket.request.max.bytes``); it
    may be changed between frames (``set_max_size``, e.g. a smaller limit before SASL
    authentication completes). After an error the decoder is poisoned: every later call raises
    the same error again, so a caller that ignores it cannot resynchronise on garbage.
    """

    __slots__ = ("max_size", "limit_name", "_head", "_head_len", "_frame", "_size", "_filled",
                 "_error", "_scratch", "_direct")

    def __init__(self, max_size: int, *, scratch: bytearray | None = None,
                 limit_name: str = "socket.request.max.bytes") -> None:
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        self.max_size = max_size
        self.limit_name = limit_name  # named in FrameTooLargeError
        self._head = bytearray(4)  # a size prefix split across feeds
        self._head_len = 0
        self._frame: bytearray | None = None  # body being filled; len() is its capacity
        self._size = 0  # declared body size of the frame in progress
        self._filled = 0
        self._error: Exception | None = None
        self._scratch = scratch
        self._direct = False  # last get_buffer() returned the frame's own buffer

    def set_max_size(self, max_size: int, limit_name: str = "socket.request.max.bytes") -> None:
        """Change the largest accepted body size for frames whose prefix is not read yet."""
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        self.max_size = max_size
        self.limit_name = limit_name

    @property
    def buffered(self) -> int:
        """Bytes received for the frame in progress (prefix included), 0 between frames."""
        if self._frame is not None:
            return 4 + self._filled
        return self._head_len

    @property
    def pending_frame_size(self) -> int | None:
        """Body size of the frame in progress once its prefix is known, else None."""
        return None if self._frame is None else self._size

    @property
    def capacity(self) -> int:
        """Bytes allocated for the frame in progress (0 between frames)."""
        frame = self._frame
        return 0 if frame is None else len(frame)

    @property
    def room(self) -> int:
        """Bytes the next read may take without allocating: the unfilled capacity of the frame
        in progress, or the rest of a size prefix between frames."""
        frame = self._frame
        return 4 - self._head_len if frame is None else len(frame) - self._filled

    def growth_needed(self) -> int:
        """Bytes the next ``get_buffer()`` will add to the frame in progress (0 if none)."""
        frame = self._frame
        if frame is None or self._error is not None:
            return 0
        filled, size, cap = self._filled, self._size, len(frame)
        if size - filled < DIRECT_READ_THRESHOLD or cap - filled >= DIRECT_READ_THRESHOLD:
            return 0  # small remainder (scratch reads) or enough room already
        new_cap = min(size, max(2 * cap, filled + INITIAL_FRAME_BYTES), cap + MAX_GROWTH_STEP)
        return new_cap - cap

    def _check_size(self, size: int) -> None:
        if size < 0:
            self._error = InvalidFrameSizeError(f"invalid frame size {size} (negative)")
            raise self._error
        if size > self.max_size:
            self._error = FrameTooLargeError(
                f"frame size {size} larger than the maximum {self.max_size} "
                f"({self.limit_name})")
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
                filled = self._filled
                take = min(self._size - filled, end - pos)
                if filled + take > len(frame):  # grow with what arrived (amortised doubling)
                    frame = self._frame = _grown(
                        frame, filled, min(self._size, max(filled + take, 2 * len(frame))))
                frame[filled:filled + take] = mv[pos:pos + take]
                self._filled = filled = filled + take
                pos += take
                if filled == self._size:
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
                else:  # a partial body: hold just what arrived
                    self._frame = bytearray(mv[pos:end])
                    self._size = size
                    self._filled = end - pos
                    pos = end
                continue
            take = min(4 - self._head_len, end - pos)
            self._head[self._head_len:self._head_len + take] = mv[pos:pos + take]
            self._head_len += take
            pos += take
            if self._head_len == 4:
                self._head_len = 0
                (size,) = SIZE_PREFIX.unpack_from(self._head, 0)
                self._check_size(size)
                if size == 0:
                    frames.append(memoryview(bytearray()))
                else:
                    self._frame = bytearray()  # allocated as bytes arrive
                    self._size = size
                    self._filled = 0
        return frames

    def get_buffer(self, frugal: bool = False) -> memoryview:
        """A writable buffer for the next socket read; pass the count to ``buffer_updated``.

        While at least ``DIRECT_READ_THRESHOLD`` bytes of the current frame are missing this is
        the unfilled room of the frame's own buffer (grown first by ``growth_needed()`` bytes;
        never longer than the frame still misses, so a read never spills into the next frame);
        otherwise the scratch buffer. ``frugal=True`` (the broker's memory pool is exhausted)
        limits a scratch read to ``room`` bytes (at least 1), so the read allocates nothing
        new beyond one size prefix.
        """
        if self._error is not None:
            raise self._error
        frame = self._frame
        if frame is not None and self._size - self._filled >= DIRECT_READ_THRESHOLD:
            growth = self.growth_needed()
            if growth:
                frame = self._frame = _grown(frame, self._filled, len(frame) + growth)
            self._direct = True
            return memoryview(frame)[self._filled:]
        self._direct = False
        if self._scratch is None:
            self._scratch = bytearray(SCRATCH_SIZE)
        if frugal:
            return memoryview(self._scratch)[:max(1, self.room)]
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """Account for ``nbytes`` written into the last ``get_buffer()``; return completed frames."""
        if self._direct:
            self._direct = False
            frame = self._frame
            assert frame is not None
            self._filled += nbytes
            if self._filled == self._size:
                self._frame = None
                return [memoryview(frame)]
            return []
        assert self._scratch is not None
        return self.feed(memoryview(self._scratch)[:nbytes])
