"""`client.aio_connection.BrokerConnection` against a scripted broker on 127.0.0.1: pipelined
requests fail together when the broker goes away, and requests whose callers gave up
(cancelled, timed out) never leave an unretrieved exception behind. Before this was so, broker
logs filled with asyncio's "Future exception was never retrieved ... BrokerConnectionError:
... connection closed" whenever a peer of a replica fetcher or the AlterPartition sender died
(seen in the long fault schedule, tests/faults/RESULTS.md)."""

from __future__ import annotations

import asyncio
import gc
import struct

import pytest

from client.aio_connection import BrokerConnection, BrokerConnectionError, RequestTimeout
from protocol.headers import decode_request_header, encode_response_header
from protocol.messages import ApiVersionsResponse, MetadataRequest

API_VERSIONS, METADATA = 18, 3


class ScriptedBroker:
    """Answers ApiVersions (v3: ApiVersions 0-3, Metadata 0-12) and never anything else;
    `drop()` closes every connection it accepted."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.held = 0  # requests received and left unanswered

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header, _ = decode_request_header(memoryview(await reader.readexactly(size)))
                if header.api_key != API_VERSIONS:
                    self.held += 1
                    continue
                body = ApiVersionsResponse(error_code=0, api_keys=[
                    ApiVersionsResponse.ApiVersion(api_key=API_VERSIONS, min_version=0,
                                                   max_version=3),
                    ApiVersionsResponse.ApiVersion(api_key=METADATA, min_version=0,
                                                   max_version=12)])
                payload = encode_response_header(header.correlation_id, 0) + \
                    body.encode(header.api_version)
                writer.write(struct.pack(">i", len(payload)) + payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def drop(self) -> None:
        for w in self.writers:
            w.close()
        self.writers.clear()

    async def stop(self) -> None:
        await self.drop()
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def broker():
    b = ScriptedBroker()
    await b.start()
    yield b
    await b.stop()


@pytest.fixture
async def unhandled():
    """The event loop's exception-handler calls (asyncio logs 'Future exception was never
    retrieved' through it when such a future is collected)."""
    loop = asyncio.get_running_loop()
    seen: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    yield seen
    loop.set_exception_handler(previous)


def metadata() -> MetadataRequest:
    return MetadataRequest(topics=[])


async def connected(broker: ScriptedBroker, **kw) -> BrokerConnection:
    conn = BrokerConnection("127.0.0.1", broker.server.sockets[0].getsockname()[1], "t", **kw)
    await conn.connect()
    assert conn.versions[METADATA] == (0, 12)
    return conn


async def until(cond, what: str) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def collected(seen: list[dict]) -> list[str]:
    gc.collect()
    return [str(c.get("message")) + ": " + repr(c.get("exception")) for c in seen]


async def test_pipelined_requests_all_fail_when_the_broker_closes(broker, unhandled):
    conn = await connected(broker)
    callers = [asyncio.create_task(conn.request(METADATA, metadata())) for _ in range(3)]
    await until(lambda: broker.held == 3, "requests at the broker")
    await broker.drop()
    for task in callers:
        with pytest.raises(BrokerConnectionError, match="closed by the broker"):
            await task
    assert not conn.connected
    with pytest.raises(BrokerConnectionError):
        await conn.request(METADATA, metadata())
    del callers, task
    assert collected(unhandled) == []


async def test_requests_whose_callers_gave_up_leave_no_unretrieved_exception(broker,
                                                                           unhandled):
    conn = await connected(broker)
    cancelled = asyncio.create_task(conn.request(METADATA, metadata()))
    waiting = asyncio.create_task(conn.request(METADATA, metadata()))
    await until(lambda: broker.held == 2, "requests at the broker")
    cancelled.cancel()  # e.g. a fetcher being stopped by a LeaderAndIsr
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert conn.connected
    await conn.close()  # e.g. the fetcher drops its connection after an error
    with pytest.raises(BrokerConnectionError, match="connection closed"):
        await waiting
    del cancelled, waiting
    assert collected(unhandled) == []


async def test_a_timeout_closes_the_connection_and_fails_the_other_requests(broker,
                                                                           unhandled):
    conn = await connected(broker)
    other = asyncio.create_task(conn.request(METADATA, metadata()))
    gave_up = asyncio.create_task(conn.request(METADATA, metadata()))
    await until(lambda: broker.held == 2, "requests at the broker")
    gave_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gave_up
    with pytest.raises(RequestTimeout, match="timed out"):
        await conn.request(METADATA, metadata(), timeout_s=0.1)
    assert not conn.connected
    with pytest.raises(RequestTimeout):  # the same error as the request that timed out
        await other
    await conn.close()
    del other, gave_up
    assert collected(unhandled) == []
