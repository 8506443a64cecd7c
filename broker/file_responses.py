"""Sending a response that carries file slices (``FileSlice``: fetched records) on one
connection of ``broker.processor``.

Responses with file slices: on a plain TCP socket, once the transport's write buffer has
drained, the whole response goes straight to the socket (headers with send(MSG_MORE), slices
with os.sendfile, zero copy; writability waits on a dup of the descriptor). Otherwise
(``use_sendfile=False``, TLS-like transports) slices are read with ``os.pread`` in the
default executor and written through the transport. ``benchmarks/bench_network.py``
compares the two.

Functions over the connection (a ``ProcessorBase``): ``send_with_files`` runs as the
connection's sending task while it owns the transport (``_sending``); ``inline_file_parts``
turns small slices into bytes so they are written with the other responses.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

from broker.request_channel import FileSlice, Request, Response
from protocol.frames import SIZE_PREFIX

__all__ = ["INLINE_FILE_BYTES", "inline_file_parts", "send_with_files"]

log = logging.getLogger("broker.processor")

PREAD_CHUNK = 1024 * 1024  # fallback read size for file slices
SENDFILE_BURST = 4 * 1024 * 1024  # most bytes sent with os.sendfile before yielding
# file slices up to this many bytes in all are read with os.pread (page cache) and written
# with the response, as bytes: cheaper than a sending task, a dup'ed socket and sendfile calls
# for the small fetch answers a busy follower gets (issue 21)
INLINE_FILE_BYTES = 64 * 1024
MSG_MORE = getattr(socket, "MSG_MORE", 0)  # Linux: hold a header back for the file bytes


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def send_with_files(conn, response: Response, request: Request | None = None) -> None:
    transport = conn.transport
    assert transport is not None
    try:
        conn._write_out()
        parts: list[Any] = [SIZE_PREFIX.pack(response.size), *response.parts]
        if conn._sendfile_ok and conn._sock_fd is not None:
            await _transport_drained(conn)
            if not conn.closed:
                await _send_direct(conn, parts)
        else:
            for part in parts:
                if conn.closed:
                    return
                if isinstance(part, FileSlice):
                    await _send_slice_pread(conn, part)
                else:
                    transport.write(part)
        conn.last_active_ms = conn.server.clock()
    except Exception as e:
        log.warning("closing %s: sending file data failed: %r", conn.connection_id, e)
        conn.close()
    finally:
        completed = conn.server.request_completed
        if completed is not None and request is not None:
            completed(request, time.monotonic_ns())
        conn._sending = False
        conn._send_task = None
        if not conn.closed:
            conn._update_reading()
            conn._flush()


async def _transport_drained(conn) -> None:
    """Wait until the transport has handed every buffered byte to the socket."""
    transport = conn.transport
    assert transport is not None
    if not transport.get_write_buffer_size():
        return
    # high=low=0: pause_writing now, resume_writing exactly when the buffer is empty
    transport.set_write_buffer_limits(high=0, low=0)
    try:
        while transport.get_write_buffer_size() and not conn.closed:
            await conn._wait_drained()
    finally:
        if not transport.is_closing():
            transport.set_write_buffer_limits()  # back to asyncio's defaults


async def _send_direct(conn, parts: list[Any]) -> None:
    """Send ``parts`` straight to the socket: bytes with send(MSG_MORE), file slices with
    os.sendfile (zero copy), waiting for writability on a dup of the socket's descriptor
    (the original is registered to the transport). The transport's buffer is empty and
    nothing else writes meanwhile, so the stream order holds."""
    assert conn._sock_fd is not None
    raw = socket.socket(fileno=os.dup(conn._sock_fd))
    try:
        raw.setblocking(False)
        pending: list[Any] = []
        for part in parts:
            if isinstance(part, FileSlice):
                if pending:
                    await _raw_send(conn, raw, b"".join(pending), MSG_MORE)
                    pending = []
                await _raw_sendfile(conn, raw, part)
            else:
                pending.append(part)
            if conn.closed:
                return
        if pending:
            await _raw_send(conn, raw, b"".join(pending), 0)
    finally:
        raw.close()


async def _raw_send(conn, raw: socket.socket, data: bytes, flags: int) -> None:
    view = memoryview(data)
    while view and not conn.closed:
        try:
            n = raw.send(view, flags)
        except (BlockingIOError, InterruptedError):
            await _socket_writable(conn, raw)
            continue
        view = view[n:]
        conn.last_active_ms = conn.server.clock()


async def _raw_sendfile(conn, raw: socket.socket, part: FileSlice) -> None:
    in_fd = part.fileno()
    position, remaining = part.position, part.length
    while remaining and not conn.closed:
        burst = min(remaining, SENDFILE_BURST)
        try:
            n = os.sendfile(raw.fileno(), in_fd, position, burst)
        except (BlockingIOError, InterruptedError):
            await _socket_writable(conn, raw)
            continue
        if n == 0:
            raise OSError(f"file slice shorter than announced: {remaining} bytes missing "
                          f"at {position}")
        position += n
        remaining -= n
        conn.last_active_ms = conn.server.clock()
        if n == SENDFILE_BURST and remaining:
            await asyncio.sleep(0)  # a fast reader: let other connections run


async def _socket_writable(conn, raw: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    conn._writable = fut
    fd = raw.fileno()
    loop.add_writer(fd, _set_done, fut)
    try:
        await fut
    finally:
        loop.remove_writer(fd)
        conn._writable = None


async def _send_slice_pread(conn, part: FileSlice) -> None:
    """Fallback (TLS-like transports, use_sendfile=False): os.pread in the executor."""
    loop = asyncio.get_running_loop()
    transport = conn.transport
    assert transport is not None
    fd = part.fileno()
    position, remaining = part.position, part.length
    while remaining:
        chunk = await loop.run_in_executor(None, os.pread, fd, min(remaining, PREAD_CHUNK),
                                           position)
        if not chunk:
            raise OSError(f"file slice shorter than announced at {position}")
        if conn.closed:
            return
        transport.write(chunk)
        conn.last_active_ms = conn.server.clock()
        position += len(chunk)
        remaining -= len(chunk)
        if conn._writing_paused:
            await conn._wait_drained()


def inline_file_parts(response: Response) -> Response:
    """`response` with its (small) file slices read into bytes (in place), or as it is when
    a read fails or comes up short (the sending task then reports the error and closes)."""
    parts = []
    try:
        for part in response.parts:
            if isinstance(part, FileSlice):
                data = os.pread(part.fileno(), part.length, part.position)
                if len(data) != part.length:
                    return response
                parts.append(data)
            else:
                parts.append(part)
    except (OSError, ValueError):
        return response
    response.parts = parts
    response.memory_size = response.size
    response.has_file_parts = False
    return response
