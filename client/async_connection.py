"""AsyncKafkaConnection: one asyncio connection to a Kafka broker, for broker-to-broker traffic.

The async sibling of :mod:`client.connection` (same framing, headers and codec): the
controller's channel manager sends LeaderAndIsr / UpdateMetadata / StopReplica with it, and
other inter-broker senders (replica fetchers, AlterPartition) may too. No ApiVersions
negotiation: the caller picks the version (inter-broker versions are fixed by the
protocol version, as Kafka's ``inter.broker.protocol.version``).

Requests may be pipelined; responses arrive in request order (Kafka answers one connection in
order), so a FIFO of futures matches them, and the correlation id is checked. Any I/O error,
timeout, malformed or mismatched response closes the connection and fails every pending
request with :class:`ConnectionError`; the caller reconnects with a new object.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
from typing import Any

from protocol import api
from protocol.headers import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
    response_header_version,
)

__all__ = ["AsyncKafkaConnection"]

_SIZE = struct.Struct(">i")
API_VERSIONS = 18


class AsyncKafkaConnection:
    """``await AsyncKafkaConnection.open(host, port, client_id)``, then
    ``await conn.request(api_key, version, message)`` -> decoded response."""

    def __init__(self, host: str, port: int, client_id: str = "josef-broker", *,
                 max_response_bytes: int = 100 << 20) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: collections.deque[tuple[int, int, int, asyncio.Future]] = \
            collections.deque()
        self._correlation = 0
        self._read_task: asyncio.Task | None = None
        self._closed = False
        self._error: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "josef-broker", *,
                   timeout: float = 30.0, **kwargs: Any) -> AsyncKafkaConnection:
        """Connect within ``timeout`` seconds (``OSError`` / ``TimeoutError`` otherwise)."""
        conn = cls(host, port, client_id, **kwargs)
        conn._reader, conn._writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), timeout)
        conn._read_task = asyncio.get_running_loop().create_task(
            conn._read_loop(), name=f"kafka-conn-{host}:{port}")
        return conn

    @property
    def closed(self) -> bool:
        return self._closed

    async def request(self, api_key: int, version: int, body: Any,
                      timeout: float | None = 30.0) -> Any:
        """Send ``body`` (a generated request message) as ``api_key`` v``version`` and
        return the decoded response. Raises ConnectionError (connection failed/closed),
        TimeoutError (no answer within ``timeout`` s: the connection is closed)."""
        if self._closed:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed: "
                                  f"{self._error!r}")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        cid = self._correlation
        payload = encode_request_header(RequestHeader(api_key, version, cid, self.client_id)) \
            + body.encode(version)
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_consume)
        self._pending.append((cid, api_key, version, fut))
        try:
            self._writer.write(_SIZE.pack(len(payload)) + payload)
            await self._writer.drain()
        except (OSError, RuntimeError) as e:
            self._fail(ConnectionError(f"send to {self.host}:{self.port} failed: {e}"))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            self._fail(ConnectionError(f"no response from {self.host}:{self.port} within "
                                       f"{timeout}s"))
            raise

    async def _read_loop(self) -> None:
        try:
            while True:
                head = await self._reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                if size < 4 or size > self.max_response_bytes:
                    raise ConnectionError(f"bad response size {size}")
                frame = memoryview(await self._reader.readexactly(size))
                if not self._pending:
                    raise ConnectionError("response without a request")
                cid, api_key, version, fut = self._pending.popleft()
                hv = 0 if api_key == API_VERSIONS else response_header_version(api_key, version)
                got, pos = decode_response_header(frame, hv)
                if got != cid:
                    raise ConnectionError(f"correlation id {got} != {cid}")
                try:
                    resp = api.decode_response(api_key, version, frame, pos)
                except Exception as e:  # noqa: BLE001 - a malformed response ends the connection
                    raise ConnectionError(f"malformed response to api {api_key} v{version}: "
                                          f"{e}") from None
                if not fut.done():
                    fut.set_result(resp)
        except asyncio.CancelledError:
            self._fail(ConnectionError("connection closed"))
            raise
        except (OSError, asyncio.IncompleteReadError, ConnectionError, ValueError) as e:
            self._fail(e if isinstance(e, ConnectionError) else
                       ConnectionError(f"connection to {self.host}:{self.port} lost: {e!r}"))

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._closed = True
        while self._pending:
            _, _, _, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(ConnectionError(str(error)))
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        task = self._read_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()

    async def close(self) -> None:
        self._fail(ConnectionError("connection closed"))
        if self._read_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._read_task
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()


def _consume(fut: asyncio.Future) -> None:
    """Mark an abandoned request's failure as seen (no 'never retrieved' warning)."""
    if not fut.cancelled():
        fut.exception()
