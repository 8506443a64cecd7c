"""The network layer under memory pressure, with real sockets on 127.0.0.1: receive buffers
grow with arrived bytes, queued.max.request.bytes bounds what all connections hold (muting
them until memory frees, never deadlocking on partial frames), memory is given back when
requests are handled or connections close, and the unauthenticated frame limit."""

import asyncio
import struct

import pytest

from broker.request_channel import Response

pytestmark = pytest.mark.timeout(60)

MiB = 1024 * 1024


def request_frame(correlation_id: int, body_size: int) -> bytes:
    header = struct.pack(">ihhi", 8 + body_size, 0, 0, correlation_id)
    return header + b"\x07" * body_size


async def read_response(reader) -> int:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    body = await reader.readexactly(size)
    return struct.unpack_from(">i", body)[0]


def small_response(request) -> Response:
    return Response(struct.pack(">ii", request.correlation_id, request.frame.nbytes))


async def until(predicate, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def test_declared_size_alone_allocates_nothing(socket_servers, connect):
    server = await socket_servers(small_response)
    _, writer = await connect(server)
    writer.write(struct.pack(">i", 90 * MiB) + b"x" * 1000)  # announce 90 MB, send 1000 bytes
    await writer.drain()
    await until(lambda: server.memory_pool.used > 0)
    await asyncio.sleep(0.05)
    assert server.memory_pool.used < 256 * 1024
    (processor,) = server.connections.values()
    assert processor._decoder.pending_frame_size == 90 * MiB
    writer.close()
    await until(lambda: server.memory_pool.used == 0)


async def test_pool_bounds_memory_and_mutes_until_handlers_release(socket_servers, connect):
    gate = asyncio.Event()
    handled = []

    async def handler(request):
        handled.append(request.correlation_id)
        await gate.wait()
        return small_response(request)

    capacity = 4 * MiB
    server = await socket_servers(handler, queued_max_request_bytes=capacity,
                                  socket_request_max_bytes=2 * MiB, num_io_threads=64)
    pool = server.memory_pool
    conns = [await connect(server) for _ in range(8)]
    for i, (_, writer) in enumerate(conns):
        writer.write(request_frame(i, 2 * MiB - 8))  # 8 x 2 MiB = 16 MiB offered
    await until(lambda: pool.waiting > 0 and pool.out_of_memory)
    await asyncio.sleep(0.2)  # muted connections stay muted while handlers hold memory
    assert len(handled) < 8
    assert pool.peak_used <= capacity + 2 * MiB  # non-strict: one request over at most
    gate.set()
    replies = await asyncio.gather(*(read_response(r) for r, _ in conns))
    assert sorted(replies) == list(range(8))
    await until(lambda: pool.used == 0 and pool.request_bytes == 0)
    assert pool.denied_total > 0 and pool.peak_used <= capacity + 2 * MiB


async def test_partial_frames_cannot_deadlock_the_pool(socket_servers, connect):
    """Every connection is mid-frame when the pool runs out and no handler holds memory: the
    oldest waiter is allowed to finish, then the others, one at a time."""
    capacity = 1 * MiB
    server = await socket_servers(small_response, queued_max_request_bytes=capacity,
                                  socket_request_max_bytes=3 * MiB)
    conns = [await connect(server) for _ in range(6)]
    for i, (_, writer) in enumerate(conns):
        writer.write(request_frame(i, 3 * MiB - 8))
    replies = await asyncio.wait_for(
        asyncio.gather(*(read_response(r) for r, _ in conns)), 30)
    assert sorted(replies) == list(range(6))
    pool = server.memory_pool
    await until(lambda: pool.used == 0)
    assert pool.peak_used <= capacity + 3 * MiB + 256 * 1024


async def test_closing_connections_give_their_memory_back(socket_servers, connect):
    gate = asyncio.Event()

    async def handler(request):
        await gate.wait()
        return small_response(request)

    server = await socket_servers(handler, queued_max_request_bytes=8 * MiB,
                                  socket_request_max_bytes=8 * MiB)
    pool = server.memory_pool
    conns = [await connect(server) for _ in range(3)]
    conns[0][1].write(request_frame(0, 1 * MiB))  # complete: held by the handler
    conns[1][1].write(request_frame(1, 4 * MiB)[: 2 * MiB])  # partial frame
    conns[2][1].write(request_frame(2, 100))
    await until(lambda: pool.used >= 3 * MiB)
    for _, writer in conns:
        writer.close()
    await until(lambda: server.connection_count == 0)
    assert pool.used == 0 and pool.request_bytes == 0
    gate.set()
    await asyncio.sleep(0.05)
    assert pool.used == 0 and pool.request_bytes == 0  # late handler_done: nothing twice


async def test_unauthenticated_frame_limit_until_authenticated(socket_servers, connect):
    def handler(request):
        if request.frame[8:] == b"auth":
            request.processor.authenticated()
        return small_response(request)

    server = await socket_servers(handler, max_unauthenticated_frame_bytes={"plaintext": 100})
    reader, writer = await connect(server)
    writer.write(request_frame(1, 92))  # 100 bytes: allowed
    assert await read_response(reader) == 1
    writer.write(request_frame(2, 93))  # 101 bytes: closed before any byte is buffered
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert server.malformed_closed == 1

    reader, writer = await connect(server)
    writer.write(struct.pack(">ihhi", 12, 0, 0, 3) + b"auth")
    assert await read_response(reader) == 3
    writer.write(request_frame(4, 10_000))
    assert await read_response(reader) == 4


async def test_unauthenticated_limit_settable_per_connection(socket_servers, connect):
    server = await socket_servers(small_response)
    reader, writer = await connect(server)
    await until(lambda: server.connection_count == 1)
    (processor,) = server.connections.values()
    assert processor.max_unauthenticated_frame_bytes is None
    processor.max_unauthenticated_frame_bytes = 50
    writer.write(request_frame(1, 100))
    assert await asyncio.wait_for(reader.read(), 5) == b""
