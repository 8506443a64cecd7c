"""An asyncio connection to one Kafka broker, for broker-to-broker traffic (replica fetchers,
the AlterPartition sender) and anything else that must not block the event loop.

`BrokerConnection(host, port, client_id)`: `await connect()` opens the TCP connection (with
`receive_buffer_bytes` as SO_RCVBUF when given, Kafka's `replica.socket.receive.buffer.bytes`)
(or, with ``opener=``, awaits ``opener()`` for a ready ``(reader, writer)``: TLS/SASL
inter-broker listeners) and sends ApiVersions (v3, falling back to v0 on UNSUPPORTED_VERSION,
KIP-511); then
`await request(api_key, body, version=None)` sends one request (the highest version both sides
support unless `version` is given) and returns `(version, response)`. Requests may be
pipelined: responses are matched to requests in order by correlation id, as Kafka's
NetworkClient does. Frames: 4-byte big-endian size, request header v1/v2, body.

Errors: `ConnectionError` subclasses only: `BrokerConnectionError` (refused, reset, closed by
the peer, a response above `max_response_bytes`, a correlation id out of order, a malformed
response, no common version) and `RequestTimeout` (no answer within `timeout_s`; the
connection is closed, as Kafka's `request.timeout.ms` handling does). After any error the
connection is closed and every outstanding request fails with the same error; call
`connect()` again (or make a new object) to retry.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import struct

from client.versions import default_max_version
from protocol import api
from protocol.errors import ErrorCode, FrameTooLargeError, InvalidFrameSizeError
from protocol.frames import FrameDecoder
from protocol.headers import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
    response_header_version,
)

__all__ = ["BrokerConnection", "BrokerConnectionError", "RequestTimeout"]

API_VERSIONS = 18
_SIZE = struct.Struct(">i")


class BrokerConnectionError(ConnectionError):
    """The connection failed or is unusable (the message names the broker address)."""


class RequestTimeout(BrokerConnectionError):
    """No response within the request timeout."""


class BrokerConnection:
    """See the module docstring. Not thread-safe; use from one event loop."""

    def __init__(self, host: str, port: int, client_id: str, *, timeout_s: float = 30.0,
                 max_response_bytes: int = 100 << 20, receive_buffer_bytes: int | None = None,
                 ssl=None, opener=None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.ssl = ssl
        #: ``async opener() -> (StreamReader, StreamWriter)`` replacing the plain TCP connect
        #: (e.g. broker.security.inter_broker.inter_broker_connect for TLS/SASL listeners)
        self.opener = opener
        self.versions: dict[int, tuple[int, int]] = {}
        self._writer: asyncio.StreamWriter | None = None
        # (correlation id, api key, version, future, deadline on the loop's clock)
        self._pending: collections.deque = collections.deque()
        self._correlation = 0
        self._error: BrokerConnectionError | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._error is None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address}, connected={self.connected})"

    # --- lifecycle ------------------------------------------------------------------------
    async def connect(self) -> None:
        """Open the connection and learn the broker's API versions; BrokerConnectionError /
        RequestTimeout on failure (within `timeout_s`)."""
        await self.close()
        self._error = None
        loop = asyncio.get_running_loop()
        if self.opener is not None:
            try:
                reader, writer = await asyncio.wait_for(self.opener(), self.timeout_s)
            except TimeoutError:
                raise RequestTimeout(f"{self.address}: connect timed out") from None
            except (OSError, ConnectionError) as e:
                raise BrokerConnectionError(f"{self.address}: {e}") from None
            return await self._started(reader, writer)
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM), self.timeout_s)
            family, type_, proto, _, addr = infos[0]
            sock = socket.socket(family, type_, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.receive_buffer_bytes and self.receive_buffer_bytes > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                                    self.receive_buffer_bytes)
                await asyncio.wait_for(loop.sock_connect(sock, addr), self.timeout_s)
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(sock=sock, ssl=self.ssl,
                                            server_hostname=self.host if self.ssl else None,
                                            limit=1 << 20), self.timeout_s)
            except BaseException:
                sock.close()
                raise
        except TimeoutError:
            raise RequestTimeout(f"{self.address}: connect timed out") from None
        except OSError as e:
            raise BrokerConnectionError(f"{self.address}: {e.strerror or e}") from None
        await self._started(reader, writer)

    async def _started(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        # responses are read by a protocol on the transport itself (no reader task, no
        # StreamReader copies): each complete frame resolves its request's future from the
        # transport's callback. The opener's reader is done with: a broker sends nothing
        # but answers, and the opener read every answer it asked for.
        writer.transport.set_protocol(_ResponseReader(self))
        try:
            self.versions = await self._api_versions()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Close the socket; outstanding requests fail with BrokerConnectionError."""
        self._fail(BrokerConnectionError(f"{self.address}: connection closed"))

    def _fail(self, error: BrokerConnectionError) -> None:
        if self._error is None:
            self._error = error
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        while self._pending:
            fut = self._pending.popleft()[3]
            if not fut.done():
                fut.set_exception(error)
                fut.exception()  # retrieved: a caller that gave up must not log it

    # --- versions -------------------------------------------------------------------------
    async def _api_versions(self) -> dict[int, tuple[int, int]]:
        spec = api.API_KEYS[API_VERSIONS]
        for version in (3, 0):
            body = spec.request_cls()
            if version >= 3:
                body.client_software_name = "josef"
                body.client_software_version = "1"
            resp = await self._send(API_VERSIONS, version, body)
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
                continue
            if resp.error_code:
                raise BrokerConnectionError(f"{self.address}: ApiVersions failed with error "
                                            f"{resp.error_code}")
            return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        raise BrokerConnectionError(f"{self.address}: ApiVersions failed")

    def supports(self, api_key: int) -> bool:
        return api_key in self.versions and api_key in api.API_KEYS

    def version_for(self, api_key: int, max_version: int | None = None,
                    min_version: int | None = None) -> int:
        """The highest version of `api_key` both sides support, within
        [min_version, max_version]; BrokerConnectionError if there is none."""
        spec = api.API_KEYS.get(api_key)
        theirs = self.versions.get(api_key)
        if spec is None or theirs is None:
            raise BrokerConnectionError(f"{self.address}: api {api_key} not supported")
        hi = min(spec.max_version, theirs[1], default_max_version(api_key, spec.max_version)
                 if max_version is None else max_version)
        lo = max(spec.min_version, theirs[0], 0 if min_version is None else min_version)
        if hi < lo:
            raise BrokerConnectionError(f"{self.address}: no common version of api {api_key}")
        return hi

    # --- requests -------------------------------------------------------------------------
    async def request(self, api_key: int, body, version: int | None = None,
                      timeout_s: float | None = None):
        """Send `body` (a generated request message) and return `(version, response)`."""
        if version is None:
            version = self.version_for(api_key)
        return version, await self._send(api_key, version, body, timeout_s)

    async def _send(self, api_key: int, version: int, body, timeout_s: float | None = None):
        if self._error is not None or self._writer is None:
            raise self._error or BrokerConnectionError(f"{self.address}: not connected")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        cid = self._correlation
        header = encode_request_header(RequestHeader(api_key, version, cid, self.client_id))
        payload = header + body.encode(version)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        deadline = loop.time() + (self.timeout_s if timeout_s is None else timeout_s)
        self._pending.append((cid, api_key, version, fut, deadline))
        self._writer.write(_SIZE.pack(len(payload)) + payload)
        if self._watchdog is None or deadline < self._watchdog.when():
            self._arm(loop, deadline)
        return await fut

    # one timer per connection, not one per request (a replica fetcher sends hundreds of
    # requests a second): it fires at the earliest deadline of the requests in flight
    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = loop.call_at(when, self._check_deadlines)

    def _check_deadlines(self) -> None:
        self._watchdog = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        earliest = None
        for _, api_key, version, fut, deadline in self._pending:
            if fut.done():
                continue  # its caller gave up (cancelled): no timeout for it
            if deadline <= now:
                self._fail(RequestTimeout(f"{self.address}: request {api_key} v{version} "
                                          f"timed out"))
                return
            if earliest is None or deadline < earliest:
                earliest = deadline
        if earliest is not None:
            self._arm(loop, earliest)

    def _dispatch(self, buf: memoryview) -> None:
        if not self._pending:
            raise BrokerConnectionError(f"{self.address}: unexpected response")
        cid, api_key, version, fut, _ = self._pending.popleft()
        hv = 0 if api_key == API_VERSIONS else response_header_version(api_key, version)
        try:
            got, pos = decode_response_header(buf, hv)
        except Exception as e:  # noqa: BLE001
            raise BrokerConnectionError(f"{self.address}: malformed response header: {e}"
                                        ) from None
        if got != cid:
            raise BrokerConnectionError(f"{self.address}: correlation id {got} != {cid}")
        try:
            resp = api.decode_response(api_key, version, buf, pos)
        except Exception as e:  # noqa: BLE001 - one failed response closes the connection
            err = BrokerConnectionError(f"{self.address}: malformed response to api "
                                        f"{api_key} v{version}: {e}")
            if not fut.done():
                fut.set_exception(err)
            raise err from None
        if not fut.done():
            fut.set_result(resp)


class _ResponseReader(asyncio.BufferedProtocol):
    """The transport's protocol once connected: frames (4-byte size, body) to
    `BrokerConnection._dispatch`; a size above `max_response_bytes`, a malformed response, EOF
    or a lost connection fail the connection. Socket transports read straight into the
    frame's buffer (`get_buffer` / `buffer_updated`); transports that hand over bytes
    (TLS) call `data_received`."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.decoder = FrameDecoder(conn.max_response_bytes)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._frames(self.decoder.buffer_updated, nbytes)

    def data_received(self, data: bytes) -> None:
        self._frames(self.decoder.feed, data)

    def _frames(self, decode, arg) -> None:
        conn = self.conn
        try:
            for frame in decode(arg):
                conn._dispatch(frame)
        except (FrameTooLargeError, InvalidFrameSizeError) as e:
            conn._fail(BrokerConnectionError(f"{conn.address}: response refused: {e}"))
        except BrokerConnectionError as e:
            conn._fail(e)

    def eof_received(self) -> bool:
        self.conn._fail(BrokerConnectionError(f"{self.conn.address}: connection closed by "
                                              "the broker"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if exc is None:
            conn._fail(BrokerConnectionError(f"{conn.address}: connection closed by the broker"))
        else:
            conn._fail(BrokerConnectionError(f"{conn.address}: {getattr(exc, 'strerror', None) or exc}"))

    def pause_writing(self) -> None:  # requests are small; nothing waits for a drain
        pass

    def resume_writing(self) -> None:
        pass
