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
  principal) from ``server.security``. On SASL listeners every frame before authentication
  completes goes to the session's ``SaslServerAuthenticator`` (frames are limited to
  ``sasl.server.max.receive.size`` meanwhile), never to the RequestChannel; ApiVersions is
  answered by the ApiVersions handler in between. A failed authentication is logged once
  ("Failed authentication with /<ip> (channelId=<id>) (<reason>)"), answered with the
  authenticator's error response after ``connection.failed.authentication.delay.ms`` and the
  connection closed. A request after the session expired (KIP-368) closes the connection
  unless it is a SaslHandshake (re-authentication, handled by the SASL handlers). On SSL
  listeners the principal comes from the client certificate of the finished handshake.
* Responses with file slices: on a plain TCP socket, once the transport's write buffer has
  drained, the whole response goes straight to the socket (headers with send(MSG_MORE), slices
  with os.sendfile, zero copy; writability waits on a dup of the descriptor). Otherwise
  (``use_sendfile=False``, TLS-like transports) slices are read with ``os.pread`` in the
  default executor and written through the transport. ``benchmarks/bench_network.py``
  compares the two.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from broker.request_channel import FileSlice, Request, Response
from protocol.errors import ProtocolError
from protocol.frames import SIZE_PREFIX, FrameDecoder
from protocol.headers import peek_request_header

if TYPE_CHECKING:
    from broker.network import SocketServer

__all__ = ["DataReceivedProcessor", "Processor", "ProcessorBase"]

log = logging.getLogger(__name__)

REQUEST_HEADER_MIN = 8
SASL_HANDSHAKE = 17  # int16 api_key, int16 api_version, int32 correlation_id
SMALL_WRITE_JOIN = 64 * 1024  # responses up to this size are joined into one write
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


class ProcessorBase:
    """Everything a connection does except how bytes are received (see ``Processor``)."""

    def __init__(self, server: SocketServer, listener: str) -> None:
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
            self._auth_pump()
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
    # ---- SASL authentication (broker.security.authenticator) ----------------------------------
    def _auth_pump(self) -> None:
        security = self.server.security
        queue = self._auth_queue
        while queue and not self._auth_busy and not self.closed:
            if not security.ready.is_set():  # credentials still loading (startup)
                self._auth_busy = True
                asyncio.get_running_loop().create_task(self._auth_after(security.ready.wait()))
                return
            frame = queue.popleft()
            self._release_request(frame.nbytes)  # consumed here, never reaches a handler
            step = self.session.authenticator.receive(frame)
            if step.api_versions:
                api_key, version, correlation_id = peek_request_header(frame)
                result = self.server.request_channel.handler(Request(
                    self.connection_id, -1, time.monotonic_ns(), api_key, version,
                    correlation_id, frame, self.listener, self.client_address, None))
                if result is not None and not isinstance(result, Response):
                    self._auth_busy = True
                    asyncio.get_running_loop().create_task(self._auth_after(result, True))
                    return
                self._auth_write(result)
            if step.failure is not None:
                self._auth_failed(step.failure, step.response)
                return
            if step.response is not None:
                self.transport.write(SIZE_PREFIX.pack(len(step.response)) + step.response)
            if step.complete:
                self._auth_complete()
                return

    async def _auth_after(self, awaitable, is_response: bool = False) -> None:
        try:
            result = await awaitable
        except Exception:  # noqa: BLE001
            log.exception("closing %s: answering during authentication failed",
                          self.connection_id)
            self.close()
            return
        finally:
            self._auth_busy = False
        if self.closed:
            return
        if is_response:
            self._auth_write(result)
        self._auth_pump()

    def _auth_write(self, response: Response | None) -> None:
        if response is None or self.transport is None or self.closed:
            return
        if response.close:
            self.close()
            return
        self.transport.write(b"".join([SIZE_PREFIX.pack(response.size), *response.parts]))

    def _auth_failed(self, reason: str, response: bytes | None) -> None:
        log.info("Failed %sauthentication with /%s (channelId=%s) (%s)",
                 "re-" if self.session.authenticator.reauthenticating else "",
                 _host(self.client_address), self.connection_id, reason)
        self.server.failed_authentications += 1
        if self._auth_queue is not None:
            self._auth_queue.clear()
        if self.transport is not None and self._reading:
            self._reading = False
            self.transport.pause_reading()
        delay_ms = self.server.security.failed_authentication_delay_ms
        asyncio.get_running_loop().call_later(delay_ms / 1000.0, self._close_with, response)

    def _close_with(self, payload: bytes | None) -> None:
        if payload is not None and self.transport is not None and not self.closed:
            self.transport.write(SIZE_PREFIX.pack(len(payload)) + payload)
        self.close()

    def _auth_complete(self) -> None:
        auth = self.session.authenticator
        self.session.principal = auth.principal
        self.authenticated()
        queue, self._auth_queue = self._auth_queue, None
        log.debug("Successfully authenticated %s as %s", self.connection_id, auth.principal)
        for frame in queue or ():
            if not self._on_frame(frame):
                return
        self._dispatch()
        self._update_reading()

    def close_after_failed_reauthentication(self, reason: str) -> None:
        """A SASL handler's re-authentication failed: log it, stop reading and close after
        the failure delay (its response, already returned, is sent first)."""
        self._auth_failed(reason, None)

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
            self._check_session(session, api_key)
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

    def _check_session(self, session, api_key: int) -> None:
        """SSL principal on the first request; KIP-368 session expiry on every request."""
        if session.security_protocol == "SSL":
            session.settled = True
            listener = self.server.security.listener(self.listener)
            session.principal = listener.ssl_principal(
                self.transport.get_extra_info("ssl_object"))
            return
        auth = session.authenticator
        if auth is None:
            session.settled = True  # nothing to check on this connection
            return
        if api_key != SASL_HANDSHAKE and auth.session_expired(self.server.security.time_ms()):
            log.info("closing %s: SASL session of %s expired (connections.max.reauth.ms / "
                     "credential lifetime) without re-authentication", self.connection_id,
                     session.principal)
            self.server.expired_sessions_closed += 1
            self.close()

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
                response = _inline_file_parts(response)
            if response.has_file_parts:
                self._sending = True
                request.send_start_ns = time.monotonic_ns()
                self._send_task = asyncio.get_running_loop().create_task(
                    self._send_with_files(response, request))
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

    async def _send_with_files(self, response: Response, request: Request | None = None) -> None:
        transport = self.transport
        assert transport is not None
        try:
            self._write_out()
            parts: list[Any] = [SIZE_PREFIX.pack(response.size), *response.parts]
            if self._sendfile_ok and self._sock_fd is not None:
                await self._transport_drained()
                if not self.closed:
                    await self._send_direct(parts)
            else:
                for part in parts:
                    if self.closed:
                        return
                    if isinstance(part, FileSlice):
                        await self._send_slice_pread(part)
                    else:
                        transport.write(part)
            self.last_active_ms = self.server.clock()
        except Exception as e:
            log.warning("closing %s: sending file data failed: %r", self.connection_id, e)
            self.close()
        finally:
            completed = self.server.request_completed
            if completed is not None and request is not None:
                completed(request, time.monotonic_ns())
            self._sending = False
            self._send_task = None
            if not self.closed:
                self._update_reading()
                self._flush()

    async def _transport_drained(self) -> None:
        """Wait until the transport has handed every buffered byte to the socket."""
        transport = self.transport
        assert transport is not None
        if not transport.get_write_buffer_size():
            return
        # high=low=0: pause_writing now, resume_writing exactly when the buffer is empty
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            while transport.get_write_buffer_size() and not self.closed:
                await self._wait_drained()
        finally:
            if not transport.is_closing():
                transport.set_write_buffer_limits()  # back to asyncio's defaults

    async def _send_direct(self, parts: list[Any]) -> None:
        """Send ``parts`` straight to the socket: bytes with send(MSG_MORE), file slices with
        os.sendfile (zero copy), waiting for writability on a dup of the socket's descriptor
        (the original is registered to the transport). The transport's buffer is empty and
        nothing else writes meanwhile, so the stream order holds."""
        assert self._sock_fd is not None
        raw = socket.socket(fileno=os.dup(self._sock_fd))
        try:
            raw.setblocking(False)
            pending: list[Any] = []
            for part in parts:
                if isinstance(part, FileSlice):
                    if pending:
                        await self._raw_send(raw, b"".join(pending), MSG_MORE)
                        pending = []
                    await self._raw_sendfile(raw, part)
                else:
                    pending.append(part)
                if self.closed:
                    return
            if pending:
                await self._raw_send(raw, b"".join(pending), 0)
        finally:
            raw.close()

    async def _raw_send(self, raw: socket.socket, data: bytes, flags: int) -> None:
        view = memoryview(data)
        while view and not self.closed:
            try:
                n = raw.send(view, flags)
            except (BlockingIOError, InterruptedError):
                await self._socket_writable(raw)
                continue
            view = view[n:]
            self.last_active_ms = self.server.clock()

    async def _raw_sendfile(self, raw: socket.socket, part: FileSlice) -> None:
        in_fd = part.fileno()
        position, remaining = part.position, part.length
        while remaining and not self.closed:
            burst = min(remaining, SENDFILE_BURST)
            try:
                n = os.sendfile(raw.fileno(), in_fd, position, burst)
            except (BlockingIOError, InterruptedError):
                await self._socket_writable(raw)
                continue
            if n == 0:
                raise OSError(f"file slice shorter than announced: {remaining} bytes missing "
                              f"at {position}")
            position += n
            remaining -= n
            self.last_active_ms = self.server.clock()
            if n == SENDFILE_BURST and remaining:
                await asyncio.sleep(0)  # a fast reader: let other connections run

    async def _socket_writable(self, raw: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._writable = fut
        fd = raw.fileno()
        loop.add_writer(fd, _set_done, fut)
        try:
            await fut
        finally:
            loop.remove_writer(fd)
            self._writable = None

    async def _send_slice_pread(self, part: FileSlice) -> None:
        """Fallback (TLS-like transports, use_sendfile=False): os.pread in the executor."""
        loop = asyncio.get_running_loop()
        transport = self.transport
        assert transport is not None
        fd = part.fileno()
        position, remaining = part.position, part.length
        while remaining:
            chunk = await loop.run_in_executor(None, os.pread, fd, min(remaining, PREAD_CHUNK),
                                               position)
            if not chunk:
                raise OSError(f"file slice shorter than announced at {position}")
            if self.closed:
                return
            transport.write(chunk)
            self.last_active_ms = self.server.clock()
            position += len(chunk)
            remaining -= len(chunk)
            if self._writing_paused:
                await self._wait_drained()

    async def _wait_drained(self) -> None:
        if self._drained is None or self._drained.done():
            self._drained = asyncio.get_running_loop().create_future()
        await self._drained

    def _wake_drained(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self.closed and self._writable is not None:
            _set_done(self._writable)  # a direct send waiting for writability: give up

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


def _host(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)


def _addr(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


def _inline_file_parts(response: Response) -> Response:
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
