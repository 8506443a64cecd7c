"""The broker's network layer: SocketServer and an Acceptor per listener.

The asyncio edition of Kafka's ``SocketServer`` (Kafka docs, "Network Layer"; broker configs
``listeners``, ``socket.request.max.bytes``, ``num.io.threads``, ``connections.max.idle.ms``,
``queued.max.requests``, ``socket.send.buffer.bytes``, ``socket.receive.buffer.bytes``,
``socket.listen.backlog.size``, ``max.connections``, ``max.connections.per.ip``).
Everything runs on one event loop; ``num.network.threads`` has no meaning here.

* ``Acceptor``: one asyncio server per listener endpoint (``broker.config.Endpoint``,
  ``PLAINTEXT://host:port``; port 0 binds an ephemeral port, reported by ``Acceptor.port``);
  each accepted connection gets a ``Processor`` (``broker.processor``: framing, in-order
  responses, backpressure, sendfile). The listening socket's accept backlog is
  ``socket.listen.backlog.size`` (Kafka default 50).
* Accepted sockets get SO_SNDBUF = ``socket.send.buffer.bytes`` and SO_RCVBUF =
  ``socket.receive.buffer.bytes`` (bytes; -1 leaves the OS default, as in Kafka; Linux
  reports twice the value set).
* Connection limits: a new connection from an IP that already has ``max.connections.per.ip``
  connections is closed at once, as Kafka does (KIP-402's per-IP check). A new connection
  while the broker has ``max.connections`` connections is closed too; Kafka instead leaves it
  in the accept backlog until a slot frees. Both default to 2**31 - 1 (no limit).
* ``accept()`` failing for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM):
  asyncio stops listening for 1 s and retries, reporting each failed call with a full
  traceback; ``AcceptErrorLimiter`` (installed while the server runs) turns those reports
  into one WARNING per 10 s with a count, as Kafka's Acceptor logs and backs off, and calls
  its ``on_failure`` hook (the broker releases idle segment descriptors there).
* Memory: ``queued.max.request.bytes`` (> 0) bounds the request bytes all connections hold
  together (``broker.memory_pool.MemoryPool``, Kafka's non-strict SimpleMemoryPool; -1 = no
  bound, Kafka's default): receive buffers grow with the bytes that arrive and a connection
  needing memory while the pool is exhausted is muted until memory frees. One scratch receive
  buffer is shared by all connections (each read's bytes are copied out at once).
  ``max_unauthenticated_frame_bytes`` ({listener name: bytes}) caps frames before
  ``Processor.authenticated()`` (Kafka's ``sasl.server.max.receive.size`` for SASL listeners).
* Security (``security``: ``broker.security.manager.SecurityManager``): SSL and SASL_SSL
  listeners wrap each accepted connection in ``broker.security.tls_transport
  .TlsServerProtocol`` (handshake off the loop, no sendfile); the Processor gives every
  connection a Session and runs SASL authentication before any request is dispatched.
* Idle connections (no bytes in or out for ``connections.max.idle.ms`` and no request waiting
  for its handler or a parked future; a client that stops reading its responses counts as
  idle) are closed by one periodic sweep task.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from broker.config import Endpoint
from broker.memory_pool import MemoryPool
from broker.processor import DataReceivedProcessor, Processor, ProcessorBase
from broker.request_channel import Handler, Request, RequestChannel
from broker.security.tls_transport import TlsServerProtocol
from protocol.frames import new_scratch

# Endpoint (broker.config) and the Processor classes (broker.processor) are re-exported for
# callers of the network layer
__all__ = ["Acceptor", "DataReceivedProcessor", "Endpoint", "Processor", "ProcessorBase",
           "SocketServer"]

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1  # Kafka's Integer.MAX_VALUE, the default of both connection limits


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


ACCEPT_OUT_OF_RESOURCES = "socket.accept() out of system resource"  # asyncio's report
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class AcceptErrorLimiter:
    """Event-loop exception handler that rate-limits asyncio's reports of ``accept()``
    failing with EMFILE/ENFILE/ENOBUFS/ENOMEM: at most one WARNING per ``interval_ms``
    (default 10 000 ms, by ``clock`` in ms) giving the number of failures since the last one;
    every other report goes to the handler installed before (or the loop's default).
    asyncio itself already backs off (the listener is paused 1 s per failure).
    ``on_failure`` (if set) is called on each failure: the broker gives back idle segment
    descriptors there (``storage.descriptor_cache``), so the retry a second later finds one."""

    def __init__(self, clock: Callable[[], float], interval_ms: float = 10_000.0) -> None:
        self.clock = clock
        self.interval_ms = interval_ms
        self.failures = 0  # total accept() failures reported
        self._unlogged = 0
        self._last_log_ms: float | None = None
        self._previous: Callable[..., object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.on_failure: Callable[[], object] | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self._previous = loop.get_exception_handler()
        self._loop = loop
        loop.set_exception_handler(self)

    def uninstall(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and loop.get_exception_handler() is self:
            loop.set_exception_handler(self._previous)

    @staticmethod
    def is_accept_failure(context: dict[str, Any]) -> bool:
        exc = context.get("exception")
        return context.get("message") == ACCEPT_OUT_OF_RESOURCES and \
            isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not self.is_accept_failure(context):
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        self.failures += 1
        self._unlogged += 1
        if self.on_failure is not None:
            try:
                self.on_failure()
            except Exception:  # noqa: BLE001 - never let the hook break the acceptor
                log.exception("releasing descriptors after an accept() failure failed")
        now = self.clock()
        if self._last_log_ms is not None and now - self._last_log_ms < self.interval_ms:
            return
        exc = context["exception"]
        sock = context.get("socket")
        where = sock.getsockname() if sock is not None else "?"
        log.warning("accept() on %s failed %d time(s) since the last report: %s; new "
                    "connections wait in the backlog (retrying every 1 s)", where,
                    self._unlogged, exc.strerror or exc)
        self._unlogged = 0
        self._last_log_ms = now


class Acceptor:
    """Listens on one endpoint and gives each accepted connection a ``Processor``."""

    def __init__(self, server: SocketServer, endpoint: Endpoint, backlog: int = 50) -> None:
        self.server = server
        self.endpoint = endpoint
        self.backlog = backlog  # socket.listen.backlog.size
        self._aserver: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        name = self.endpoint.listener_name
        cls = self.server.processor_class
        server = self.server
        security = server.security.listener(name) if server.security is not None else None
        if security is not None and security.uses_ssl:
            def factory():  # TLS around the Processor; the handshake runs off the loop
                return TlsServerProtocol(security.ssl_context, cls(server, name),
                                         on_handshake_failed=server.tls_handshake_failed)
        else:
            def factory():
                return cls(server, name)
        self._aserver = await loop.create_server(
            factory, host=self.endpoint.host or None,
            port=self.endpoint.port, backlog=self.backlog, reuse_address=True)

    @property
    def port(self) -> int:
        """The bound port (the real one when the endpoint asked for port 0)."""
        assert self._aserver is not None and self._aserver.sockets
        return self._aserver.sockets[0].getsockname()[1]

    @property
    def bound_endpoint(self) -> Endpoint:
        return dataclasses.replace(self.endpoint, port=self.port)

    def close(self) -> None:
        if self._aserver is not None:
            self._aserver.close()

    async def wait_closed(self) -> None:
        if self._aserver is not None:
            await self._aserver.wait_closed()


class SocketServer:
    """Acceptors, Processors and the RequestChannel with its IO workers, started and stopped
    together.

    ``handler`` is the API dispatcher (see ``broker.request_channel``). Sizes are in bytes,
    times in ms. ``queued_max_requests`` bounds the RequestChannel queue; socket buffer sizes of
    -1 keep the OS defaults (the broker passes Kafka's 102400 from its config). ``clock`` returns monotonic milliseconds (inject a manual one in tests).
    ``use_sendfile=False`` sends file slices with ``os.pread`` even on plain TCP.
    """

    processor_class: type[ProcessorBase] = Processor

    def __init__(self, endpoints: list[Endpoint], handler: Handler, *,
                 socket_request_max_bytes: int = 104857600, num_io_threads: int = 8,
                 connections_max_idle_ms: int = 600000, max_inflight_per_connection: int = 1,
                 max_queued_requests_per_connection: int = 16,
                 max_buffered_bytes_per_connection: int = 16 * 1024 * 1024,
                 listen_backlog: int = 50, use_sendfile: bool = True,
                 queued_max_requests: int = 500, socket_send_buffer_bytes: int = -1,
                 socket_receive_buffer_bytes: int = -1, max_connections: int = INT_MAX,
                 max_connections_per_ip: int = INT_MAX, queued_max_request_bytes: int = -1,
                 max_unauthenticated_frame_bytes: dict[str, int] | None = None,
                 clock: Callable[[], float] = _monotonic_ms, security: Any = None) -> None:
        if max_inflight_per_connection < 1 or max_queued_requests_per_connection < 1:
            raise ValueError("per-connection request limits must be >= 1")
        self.endpoints = list(endpoints)
        self.socket_request_max_bytes = socket_request_max_bytes
        self.connections_max_idle_ms = connections_max_idle_ms
        self.max_inflight_per_connection = max_inflight_per_connection
        self.max_queued_requests_per_connection = max_queued_requests_per_connection
        self.max_buffered_bytes_per_connection = max_buffered_bytes_per_connection
        self.clock = clock
        self.use_sendfile = use_sendfile
        self.socket_send_buffer_bytes = socket_send_buffer_bytes
        self.socket_receive_buffer_bytes = socket_receive_buffer_bytes
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        #: broker.security.manager.SecurityManager (None: every listener plain, anonymous)
        self.security = security
        self.failed_authentications = 0  # TLS handshakes and SASL exchanges that failed
        self.expired_sessions_closed = 0  # KIP-368 sessions used past their lifetime
        self.throttled_total = 0  # times a connection was muted for a quota (KIP-219)
        self.request_channel = RequestChannel(handler, num_io_threads, queued_max_requests)
        self.memory_pool = MemoryPool(queued_max_request_bytes)
        self.receive_scratch = new_scratch()  # shared: one event loop, reads copied out at once
        self.max_unauthenticated_frame_bytes = {
            name.upper(): n for name, n in (max_unauthenticated_frame_bytes or {}).items()}
        #: called as ``request_completed(request, end_ns)`` once a response left (metrics)
        self.request_completed: Callable[[Request, int], None] | None = None
        self.acceptors = [Acceptor(self, e, listen_backlog) for e in self.endpoints]
        self.connections: dict[str, ProcessorBase] = {}
        self._per_ip: dict[str, int] = {}  # open connections by client IP
        self._per_listener: dict[str, int] = {}  # open connections by listener
        self._broker_counted = 0  # open connections counting against max.connections
        self.accepted_total = 0
        self.limit_closed = 0  # closed at accept by max.connections / max.connections.per.ip
        self.malformed_closed = 0
        self.idle_closed = 0
        self._conn_index = 0
        self._sweeper: asyncio.Task[None] | None = None
        self._stopped = False
        self.accept_errors = AcceptErrorLimiter(clock)

    @property
    def connection_count(self) -> int:
        return len(self.connections)

    def next_connection_index(self) -> int:
        self._conn_index += 1
        return self._conn_index

    def register(self, processor: ProcessorBase) -> None:
        """Admit a new connection (called from ``connection_made``) or close it at once when
        the server is stopping or a connection limit is reached (with ``security``'s
        ``connection_quotas``: per-IP overrides, per-listener limits and creation rates,
        KIP-612)."""
        if self._stopped:
            processor.close()
            return
        ip = _client_ip(processor.client_address)
        listener = processor.listener
        cq = self.security.connection_quotas if self.security is not None else None
        per_ip = cq.max_for_ip(ip) if cq is not None else self.max_connections_per_ip
        if self._per_ip.get(ip, 0) >= per_ip:
            log.info("closing %s: %s already has max.connections.per.ip=%d connections",
                     processor.connection_id, ip, per_ip)
            self.limit_closed += 1
            processor.close()
            return
        counted = cq is None or cq.counts_for_broker(listener)
        total = len(self.connections) if cq is None else self._broker_counted
        if counted and total >= self.max_connections:
            log.info("closing %s: the broker has max.connections=%d connections",
                     processor.connection_id, self.max_connections)
            self.limit_closed += 1
            processor.close()
            return
        if cq is not None and self._per_listener.get(listener, 0) >= \
                cq.max_for_listener(listener):
            log.info("closing %s: listener %s has listener.name.%s.max.connections=%d "
                     "connections", processor.connection_id, listener, listener.lower(),
                     cq.max_for_listener(listener))
            self.limit_closed += 1
            processor.close()
            return
        self._set_buffer_sizes(processor)
        self.connections[processor.connection_id] = processor
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        self._per_listener[listener] = self._per_listener.get(listener, 0) + 1
        if counted:
            self._broker_counted += 1
        self.accepted_total += 1
        if cq is not None:
            self._creation_quotas(cq, processor, ip, listener)

    def _creation_quotas(self, cq, processor: ProcessorBase, ip: str, listener: str) -> None:
        """KIP-612 creation rates: hold a connection over the listener/broker rate for the
        throttle time; close one over its IP's rate after it."""
        loop = asyncio.get_running_loop()
        close_after = cq.ip_throttle_ms(ip)
        if close_after:
            log.info("closing %s after %d ms: %s is over its connection_creation_rate quota",
                     processor.connection_id, close_after, ip)
            self.limit_closed += 1
            processor.throttle(close_after)
            loop.call_later(close_after / 1000.0, processor.close)
            return
        delay = cq.creation_delay_ms(listener)
        if delay:
            processor.throttle(delay)

    def tls_handshake_failed(self, processor: ProcessorBase, reason: str) -> None:
        """A TLS handshake failed: one log line as Kafka's Selector writes it."""
        self.failed_authentications += 1
        log.info("Failed authentication with /%s (channelId=%s) (%s)",
                 _client_ip(processor.client_address), processor.connection_id, reason)

    def unregister(self, processor: ProcessorBase) -> None:
        if self.connections.get(processor.connection_id) is not processor:
            return  # never admitted
        del self.connections[processor.connection_id]
        ip = _client_ip(processor.client_address)
        left = self._per_ip[ip] - 1
        if left:
            self._per_ip[ip] = left
        else:
            del self._per_ip[ip]
        listener = processor.listener
        self._per_listener[listener] = self._per_listener.get(listener, 1) - 1
        cq = self.security.connection_quotas if self.security is not None else None
        if cq is None or cq.counts_for_broker(listener):
            self._broker_counted -= 1

    def connections_from(self, ip: str) -> int:
        """Open connections whose client is ``ip``."""
        return self._per_ip.get(ip, 0)

    def _set_buffer_sizes(self, processor: ProcessorBase) -> None:
        transport = processor.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None:
            return
        if self.socket_send_buffer_bytes != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.socket_send_buffer_bytes)
        if self.socket_receive_buffer_bytes != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                            self.socket_receive_buffer_bytes)

    async def start(self) -> None:
        """Start workers, then listeners, then the idle sweep."""
        self.request_channel.start()
        self.accept_errors.install(asyncio.get_running_loop())
        try:
            for acceptor in self.acceptors:
                await acceptor.start()
        except BaseException:
            await self.stop()
            raise
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop(),
                                                               name="idle-sweep")

    @property
    def bound_endpoints(self) -> list[Endpoint]:
        return [a.bound_endpoint for a in self.acceptors]

    def port(self, listener_name: str | None = None) -> int:
        """Bound port of the named listener (default: the first)."""
        for a in self.acceptors:
            if listener_name is None or a.endpoint.listener_name == listener_name.upper():
                return a.port
        raise KeyError(listener_name)

    def sweep_idle(self) -> int:
        """Close connections idle longer than ``connections.max.idle.ms``; return how many."""
        now = self.clock()
        idle = [p for p in self.connections.values()
                if p.is_idle(now, self.connections_max_idle_ms)]
        for p in idle:
            log.info("closing idle connection %s", p.connection_id)
            p.close()
        self.idle_closed += len(idle)
        return len(idle)

    async def _sweep_loop(self) -> None:
        interval_s = min(max(self.connections_max_idle_ms / 4, 10), 10_000) / 1000.0
        while True:
            await asyncio.sleep(interval_s)
            self.sweep_idle()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection, then wait for the IO workers."""
        self._stopped = True
        for acceptor in self.acceptors:
            acceptor.close()
        self.accept_errors.uninstall()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        for p in list(self.connections.values()):
            p.close()
        await self.request_channel.stop(timeout)
        await asyncio.sleep(0)  # let transports run connection_lost
        for acceptor in self.acceptors:
            try:
                await asyncio.wait_for(acceptor.wait_closed(), timeout)
            except TimeoutError:
                log.warning("listener %s did not close in %.1f s", acceptor.endpoint, timeout)


def _client_ip(address: Any) -> str:
    """The IP of a peer address tuple (``str(address)`` for anything else)."""
    if isinstance(address, tuple) and address:
        return str(address[0])
    return str(address)
