"""``Processor``: one client connection of the broker's network layer (see broker.network).

* ``Processor`` is an ``asyncio.BufferedProtocol`` with its own ``FrameDecoder``: large frames
  are received straight into their own buffer (no copy); each complete frame becomes a
  ``Request`` (header peeked: api_key, api_version, correlation_id) put on the
  ``RequestChannel``. ``DataReceivedProcessor`` is the same with ``data_received``.
* Ordering: requests of one connection are numbered; at most ``max_inflight_per_connection``
  of them are in the handler at once (default 1, Kafka's "mute the channel": requests of a
  connection are handled one after another in order, which idempotent produce relies on; a
  handler that parks returns a Future and frees the slot). Responses leave strictly in request
  order: a completed response waits until every earlier one has been sent (or skipped:
  ``None``), so pipelining clients (up to 5 in flight) always see them in order.
* Backpressure: reading pauses while a connection has ``max_queued_requests_per_connection``
  unanswered requests, or more than ``max_buffered_bytes_per_connection`` bytes of received
  frames and held responses, or the transport's write buffer is over its high-water mark
  (client not reading), or while a request of it waits for room on a full ``RequestChannel``
  (``queued.max.requests``; the request stays here until ``channel_has_room``); it resumes
  when those drain.
* Memory (``queued.max.request.bytes``, ``broker.memory_pool``): receive buffers grow with the
  bytes that arrive (``protocol.frames``), not with the declared frame size; the buffers of
  frames in progress and complete request frames (until their handler returned) are charged
  to the server's ``MemoryPool``. A connection that needs memory while the pool is out of it
  reads nothing more (at most the rest of a size prefix) and is muted until memory frees,
  like Kafka's Selector muting channels under memory pressure.
* Before authentication a listener may allow only smaller frames
  (``max_unauthenticated_frame_bytes``, Kafka's ``sasl.server.max.receive.size``, 524288):
  a larger size prefix closes the connection; ``authenticated()`` lifts the limit.
* Malformed input closes that connection only: a size prefix < 0 or > socket.request.max.bytes
  (before buffering it), or a frame too short for a request header (< 8 bytes).
* Security (issue 15, ``broker.security``): each connection gets a ``Session`` (its
  principal) from ``server.security``; on SASL listeners frames before authentication go to
  ``broker.connection_auth`` (the SASL exchange, SSL principals, KIP-368 expiry).
* Responses with file slices are sent by ``broker.file_responses`` (``os.sendfile`` on plain
  TCP, ``os.pread`` otherwise); small ones are read into bytes and written with the others.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from broker.connection_auth import auth_failed, auth_pump, check_session
from broker.file_responses import INLINE_FILE_BYTES, inline_file_parts, send_with_files
from broker.memory_pool import MemoryPool
from broker.request_channel import Request, RequestChannel, Response
from protocol.errors import ProtocolError
from protocol.frames import SIZE_PREFIX, FrameDecoder
from protocol.headers import peek_request_header

__all__ = ["ConnectionHost", "DataReceivedProcessor", "Processor", "ProcessorBase"]

log = logging.getLogger(__name__)

REQUEST_HEADER_MIN = 8
SMALL_WRITE_JOIN = 64 * 1024  # responses up to this size are joined into one write


class ConnectionHost(Protocol):
    """What a connection uses of the server that accepted it (``broker.network.SocketServer``
    implements it; the processor knows the server only through this).

    Limits (bytes; ``socket.request.max.bytes``, per-connection queue and buffer bounds,
    ``max.inflight``), the shared ``request_channel``, ``memory_pool`` and receive scratch
    buffer, ``clock()`` (monotonic ms), ``security`` (``broker.security.manager``, or None),
    the connection registry (``register`` / ``unregister`` / ``next_connection_index``), the
    ``request_completed`` metrics hook and the counters a connection bumps.
    """

    socket_request_max_bytes: int
    max_inflight_per_connection: int
    max_queued_requests_per_connection: int
    max_buffered_bytes_per_connection: int
    max_unauthenticated_frame_bytes: dict[str, int]
    use_sendfile: bool
    clock: Callable[[], float]
    security: Any
    request_channel: RequestChannel
    memory_pool: MemoryPool
    receive_scratch: Any
    request_completed: Callable[[Request, int], None] | None
    malformed_closed: int
    failed_authentications: int
    expired_sessions_closed: int
    throttled_total: int

    def next_connection_index(self) -> int: ...

    def register(self, processor: ProcessorBase) -> None: ...

    def unregister(self, processor: ProcessorBase) -> None: ...


class ProcessorBase:
    """Everything a connection does except how bytes are received (see ``Processor``)."""

    def __init__(self, server: ConnectionHost, listener: str) -> None:
        self.server = server
        self.listener = listener
        self.connection_id = ""
        self.client_address: Any = None
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.last_active_ms = server.clock()
        self._decoder = FrameDecoder(server.socket_request_max_bytes,
                                     scratch=server.receive_scratch)
        self._pool = server.memory_pool
        self._frame_charge = 0  # pool bytes charged for the frame in progress (its capacity)
        self._request_charge = 0  # pool bytes charged for complete frames not yet handled
        self._memory_muted = False  # waiting for the pool (queued.max.request.bytes)
        self._max_unauth: int | None = None
        self._authenticated = False
        self._next_seq = 0  # sequence of the next request received
        self._next_send = 0  # sequence of the next response to send
        self._pending: deque[Request] = deque()  # received, not yet given to the handler
        self._in_handler = 0
        self._awaiting = 0  # requests whose outcome (response_ready) is not known yet
        self._ready: dict[int, Request] = {}  # completed (.response), waiting for their turn
        self._held_bytes = 0  # frames pending + responses held
        self._sending = False  # an async send (file slices) owns the transport
        self._out: list[bytes | bytearray | memoryview] = []  # corked small responses
        self._out_bytes = 0
        self._out_scheduled = False
        self._reading = True
        self._waiting_for_channel = False  # registered with RequestChannel.wait_for_room
        self._writing_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._sendfile_ok = server.use_sendfile
        self._sock_fd: int | None = None
        self._send_task: asyncio.Task[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self.session: Any = None  # broker.security.listeners.Session
        self._throttled_until = 0.0  # KIP-219: muted (not read, not dispatched) until then
        self._auth_queue: deque[memoryview] | None = None  # frames before authentication
        self._auth_busy = False

    # ---- asyncio protocol callbacks --------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        local = transport.get_extra_info("sockname")
        peer = transport.get_extra_info("peername")
        self.client_address = peer
        self.connection_id = f"{_addr(local)}-{_addr(peer)}-{self.server.next_connection_index()}"
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sock is not None and transport.get_extra_info("sslcontext") is None:
            self._sock_fd = sock.fileno()  # plain socket: os.sendfile may write to it
        limit = self.server.max_unauthenticated_frame_bytes.get(self.listener)
        if limit is not None:
            self.max_unauthenticated_frame_bytes = limit
        self.server.register(self)
        security = self.server.security
        if security is not None and not self.closed:
            self.session = security.new_session(self.listener, peer)
            if self.session is not None and self.session.authenticator is not None:
                self._auth_queue = deque()
                self.max_unauthenticated_frame_bytes = security.sasl_max_receive_size(
                    self.listener)

    # ---- authentication hook (issue 15's SASL authenticator switches it on) ----------------
    @property
    def max_unauthenticated_frame_bytes(self) -> int | None:
        """Largest frame body accepted before ``authenticated()`` (None: no extra limit)."""
        return self._max_unauth

    @max_unauthenticated_frame_bytes.setter
    def max_unauthenticated_frame_bytes(self, limit: int | None) -> None:
        self._max_unauth = limit
        if self._authenticated:
            return
        if limit is None:
            self._decoder.set_max_size(self.server.socket_request_max_bytes)
        else:
            self._decoder.set_max_size(min(limit, self.server.socket_request_max_bytes),
                                       "sasl.server.max.receive.size")

    def authenticated(self) -> None:
        """Authentication completed: frames up to ``socket.request.max.bytes`` from now on."""
        self._authenticated = True
        self._decoder.set_max_size(self.server.socket_request_max_bytes)

    def _decode_failed(self, e: ProtocolError) -> None:
        log.info("closing %s: %s", self.connection_id, e)
        self.server.malformed_closed += 1
        self.close()

    def _frames_received(self, frames: list[memoryview]) -> None:
        self.last_active_ms = self.server.clock()
        self._account_memory(frames)
        if self._auth_queue is not None:  # SASL authentication not complete yet
            self._auth_queue.extend(frames)
            auth_pump(self)
            return
        for frame in frames:
            if not self._on_frame(frame):
                return
        self._dispatch()
        self._update_reading()

    # ---- memory pool (queued.max.request.bytes) --------------------------------------------
    def _account_memory(self, frames: list[memoryview]) -> None:
        """Charge what the last read allocated; reserve the next read's growth or mute."""
        pool = self._pool
        decoder = self._decoder
        done = 0
        for frame in frames:
            done += frame.nbytes
        capacity = decoder.capacity
        delta = capacity + done - self._frame_charge
        if delta > 0:
            pool.allocate(delta)
        elif delta < 0:
            pool.release(-delta)
        self._frame_charge = capacity
        if done:
            self._request_charge += done
            pool.to_requests(done)
            if pool.privileged is self:
                pool.frame_completed(self)
        self._reserve_next_read()

    def _reserve_next_read(self) -> bool:
        """Charge the growth the next ``get_buffer`` makes, or mute while the pool is out of
        memory and the next read needs memory. Returns False when muted."""
        pool = self._pool
        growth = self._decoder.growth_needed()
        if growth:
            if pool.try_allocate(growth, self):
                self._frame_charge += growth
                return True
        elif not pool.out_of_memory or self._decoder.room or pool.privileged is self:
            return True
        if not self._memory_muted:
            self._memory_muted = True
            pool.wait(self)
        return False

    def memory_available(self) -> None:
        """Called by the MemoryPool when memory frees (or this connection may finish its frame)."""
        if self.closed or not self._memory_muted:
            return
        self._memory_muted = False
        if self._reserve_next_read():
            self._update_reading()

    def _release_request(self, nbytes: int) -> None:
        """A complete frame of ``nbytes`` is no longer held (handled or consumed)."""
        self._request_charge -= nbytes
        self._pool.release_requests(nbytes)

    def _release_memory(self) -> None:
        pool = self._pool
        if self._frame_charge:
            pool.release(self._frame_charge)
            self._frame_charge = 0
        if self._request_charge:
            pool.release_requests(self._request_charge)
            self._request_charge = 0
        self._memory_muted = False
        pool.forget(self)
    def close_after_failed_reauthentication(self, reason: str) -> None:
        """A SASL handler's re-authentication failed: log it, stop reading and close after
        the failure delay (its response, already returned, is sent first)."""
        auth_failed(self, reason, None)

    def eof_received(self) -> bool:
        return False  # half-closed by the client: close (Kafka does too)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release_memory()
        self._pending.clear()
        self._ready.clear()
        self._wake_drained()
        self.server.unregister(self)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake_drained()
        self._update_reading()

    # ---- requests ------------------------------------------------------------------------
    def _on_frame(self, frame: memoryview) -> bool:
        if len(frame) < REQUEST_HEADER_MIN:
            log.info("closing %s: %d-byte frame has no request header", self.connection_id,
                     len(frame))
            self.server.malformed_closed += 1
            self.close()
            return False
        try:
            api_key, api_version, correlation_id = peek_request_header(frame)
        except Exception as e:  # contract says it cannot fail on >= 8 bytes; be safe
            log.info("closing %s: unreadable request header: %s", self.connection_id, e)
            self.server.malformed_closed += 1
            self.close()
            return False
        session = self.session
        if session is not None and not session.settled:
            check_session(self, session, api_key)
            if self.closed:
                return False
        request = Request(self.connection_id, self._next_seq, time.monotonic_ns(), api_key,
                          api_version, correlation_id, frame, self.listener,
                          self.client_address, self)
        self._next_seq += 1
        self._awaiting += 1
        self._held_bytes += len(frame)
        self._pending.append(request)
        return True

    def throttle(self, ms: float) -> None:
        """KIP-219: a quota was exceeded; read and dispatch nothing more from this connection
        for ``ms`` (responses already due still go out), as Kafka mutes the channel."""
        if ms <= 0 or self.closed:
            return
        until = self.server.clock() + ms
        if until <= self._throttled_until:
            return
        self._throttled_until = until
        self.server.throttled_total += 1
        asyncio.get_running_loop().call_later(ms / 1000.0, self._unthrottle)
        self._update_reading()

    def _unthrottle(self) -> None:
        if self.closed or self.server.clock() < self._throttled_until - 1:
            return
        self._throttled_until = 0.0
        self._dispatch()
        self._update_reading()

    @property
    def throttled(self) -> bool:
        return self._throttled_until > 0.0

    def _dispatch(self) -> None:
        if self._throttled_until:
            return
        limit = self.server.max_inflight_per_connection
        channel = self.server.request_channel
        while self._pending and self._in_handler < limit:
            if channel.full:  # queued.max.requests: keep it, stop reading until there is room
                if not self._waiting_for_channel:
                    self._waiting_for_channel = True
                    channel.wait_for_room(self)
                return
            request = self._pending.popleft()
            self._held_bytes -= len(request.frame)
            self._in_handler += 1
            channel.send_request(request)

    def channel_has_room(self) -> None:
        """Called by the RequestChannel when its queue dropped below queued.max.requests."""
        self._waiting_for_channel = False
        self._dispatch()
        self._update_reading()

    def handler_done(self, request: Request) -> Request | None:
        """Called by an IO worker when the handler returned (response or parked future).

        Returns the connection's next pending request for the same worker to run at once
        (saving a queue hop, so pipelined requests are handled in one loop iteration and their
        responses leave in one write), or None.
        """
        if self.closed:
            return None
        self._in_handler -= 1
        self._release_request(request.frame.nbytes)
        following = None
        if self._pending and not self._throttled_until:
            following = self._pending.popleft()
            self._held_bytes -= len(following.frame)
            self._in_handler += 1
        self._dispatch()
        self._update_reading()
        return following

    def response_ready(self, request: Request, response: Response | None) -> None:
        """Called when the outcome of ``request`` is known; sends what is due, in order."""
        if self.closed:
            return
        self._awaiting -= 1
        request.response = response
        self._ready[request.sequence] = request
        if response is not None:
            self._held_bytes += response.memory_size
        self._flush()

    @property
    def unanswered(self) -> int:
        """Requests received whose response has not been fully sent (or skipped) yet."""
        return self._next_seq - self._next_send + (1 if self._sending else 0)

    # ---- responses -----------------------------------------------------------------------
    def _flush(self) -> None:
        if self._sending or self.closed:
            return
        transport = self.transport
        assert transport is not None
        completed = self.server.request_completed  # metrics + request log, or None
        while self._next_send in self._ready:
            request = self._ready.pop(self._next_send)
            response = request.response
            request.response = None
            self._next_send += 1
            if response is None:
                if completed is not None:
                    completed(request, time.monotonic_ns())
                continue
            self._held_bytes -= response.memory_size
            if response.close:
                if completed is not None:
                    completed(request, time.monotonic_ns())
                self.close()
                return
            self.last_active_ms = self.server.clock()
            if response.has_file_parts and \
                    response.size - response.memory_size <= INLINE_FILE_BYTES:
                response = inline_file_parts(response)
            if response.has_file_parts:
                self._sending = True
                request.send_start_ns = time.monotonic_ns()
                self._send_task = asyncio.get_running_loop().create_task(
                    send_with_files(self, response, request))
                return
            if completed is not None:
                completed(request, time.monotonic_ns())
            self._out.append(SIZE_PREFIX.pack(response.size))
            self._out.extend(response.parts)  # type: ignore[arg-type]  # no file parts here
            self._out_bytes += 4 + response.size
            if self._out_bytes > SMALL_WRITE_JOIN or not self._pending:
                self._write_out()  # nothing more is about to complete: send now
            elif not self._out_scheduled:
                # cork: the IO worker is about to run this connection's next pipelined
                # request, so responses completed in this loop turn leave in one send
                self._out_scheduled = True
                asyncio.get_running_loop().call_soon(self._write_out)
        self._update_reading()

    def _write_out(self) -> None:
        self._out_scheduled = False
        out = self._out
        if not out or self.transport is None:
            return
        if self.closed:  # connection lost meanwhile
            self._out = []
            self._out_bytes = 0
            return
        if self._out_bytes <= SMALL_WRITE_JOIN:
            self.transport.write(b"".join(out))
        else:
            small: list[Any] = []
            for part in out:  # join small pieces, write large ones as they are
                if len(part) < 4096:
                    small.append(part)
                    continue
                if small:
                    self.transport.write(b"".join(small))
                    small = []
                self.transport.write(part)
            if small:
                self.transport.write(b"".join(small))
        self._out = []
        self._out_bytes = 0

    async def _wait_drained(self) -> None:
        if self._drained is None or self._drained.done():
            self._drained = asyncio.get_running_loop().create_future()
        await self._drained

    def _wake_drained(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self.closed and self._writable is not None:
            if not self._writable.done():  # a direct send waiting for writability: give up
                self._writable.set_result(None)

    # ---- flow control and closing ----------------------------------------------------------
    def _update_reading(self) -> None:
        if self.closed or self._sending or self.transport is None:
            return  # re-applied when the file send is over
        server = self.server
        pause = (self._writing_paused or self._waiting_for_channel or self._memory_muted
                 or self._throttled_until > 0
                 or self.unanswered >= server.max_queued_requests_per_connection
                 or self._held_bytes > server.max_buffered_bytes_per_connection)
        if pause and self._reading:
            self._reading = False
            self.transport.pause_reading()
        elif not pause and not self._reading:
            self._reading = True
            self.transport.resume_reading()

    def is_idle(self, now_ms: float, max_idle_ms: float) -> bool:
        """No bytes in or out for ``max_idle_ms`` and no request waiting for its handler.

        A connection whose responses are ready but cannot be sent (the client stopped
        reading) counts as idle, so it cannot pin memory and file slices forever.
        """
        return (not self.closed and self._awaiting == 0
                and now_ms - self.last_active_ms > max_idle_ms)

    def close(self) -> None:
        """Close the connection now; queued requests of it are dropped by the workers."""
        if self.closed:
            return
        if self._out and self.transport is not None:
            self._write_out()  # responses due before a close-connection response
        self.closed = True
        self._release_memory()
        self._pending.clear()
        self._ready.clear()
        self._wake_drained()
        if self.transport is not None:
            self.transport.close()


class Processor(ProcessorBase, asyncio.BufferedProtocol):
    """One client connection, receiving with ``asyncio.BufferedProtocol``.

    The socket reads into ``FrameDecoder.get_buffer()``: a large frame's body lands in its own
    buffer without a copy (``benchmarks/bench_network.py`` measures this against
    ``data_received``).
    """

    def get_buffer(self, sizehint: int) -> memoryview:
        pool = self._pool
        return self._decoder.get_buffer(pool.bounded and pool.used >= pool.capacity
                                        and pool.privileged is not self)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._decoder.buffer_updated(nbytes)
        except ProtocolError as e:
            self._decode_failed(e)
            return
        self._frames_received(frames)


class DataReceivedProcessor(ProcessorBase, asyncio.Protocol):
    """The same connection logic receiving with ``data_received`` (one more copy per byte)."""

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as e:
            self._decode_failed(e)
            return
        self._frames_received(frames)


def _addr(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)
