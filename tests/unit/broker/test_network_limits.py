"""queued.max.requests backpressure, socket buffer sizes and connection limits of the network
layer, with real sockets on 127.0.0.1 (ephemeral ports)."""

import asyncio
import random
import socket
import struct

import pytest

from broker.config import Endpoint
from broker.network import SocketServer
from broker.request_channel import Response
from protocol.frames import encode_frame

pytestmark = pytest.mark.timeout(30)


def request_frame(correlation_id: int, body: bytes = b"") -> bytes:
    return encode_frame(struct.pack(">hhi", 0, 0, correlation_id) + body)


async def read_response(reader) -> tuple[int, bytes]:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    body = await reader.readexactly(size)
    return struct.unpack_from(">i", body)[0], body[4:]


async def assert_closed(reader, timeout: float = 5.0) -> None:
    assert await asyncio.wait_for(reader.read(1 << 16), timeout) == b""


def echo(request) -> Response:
    return Response([struct.pack(">i", request.correlation_id), request.frame[8:]])


@pytest.fixture
def servers(socket_servers):
    async def make(handler=echo, **kw):
        return await socket_servers(handler, **kw)

    return make


async def until(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def server_socket(server: SocketServer, index: int = -1):
    processor = list(server.connections.values())[index]
    return processor.transport.get_extra_info("socket")


# ---- queued.max.requests ------------------------------------------------------------------
async def test_full_channel_holds_requests_and_pauses_reading(servers, connect):
    gate = asyncio.Event()
    handled: list[int] = []
    queue_sizes: list[int] = []

    async def handler(request):
        queue_sizes.append(server.request_channel.size)
        handled.append(request.correlation_id)
        await gate.wait()
        return echo(request)

    server = await servers(handler, num_io_threads=1, queued_max_requests=2)
    conns = []
    for i in range(6):
        conns.append(await connect(server))
        conns[-1][1].write(request_frame(i))
        # one at a time, so the order they reach the channel is known
        await until(lambda i=i: server.request_channel.size + len(handled)
                    + server.request_channel.blocked_total >= i + 1)
    channel = server.request_channel
    assert handled == [0]  # in the only worker
    assert channel.size == 2  # 1 and 2 queued: the bound
    assert channel.blocked_total == 3  # 3, 4, 5 wait in their processors
    processors = list(server.connections.values())
    assert [p.transport.is_reading() for p in processors] == [True] * 3 + [False] * 3
    gate.set()
    for i, (reader, _) in enumerate(conns):
        assert await read_response(reader) == (i, b"")
    assert handled == list(range(6))  # waiting processors got room oldest first
    assert max(queue_sizes) <= 2
    await until(lambda: all(p.transport.is_reading() for p in processors))


async def test_many_pipelining_clients_through_a_tiny_channel(servers, connect):
    rng = random.Random(7)
    max_seen = 0

    async def handler(request):
        nonlocal max_seen
        max_seen = max(max_seen, server.request_channel.size)
        if rng.random() < 0.3:
            await asyncio.sleep(rng.random() / 1000)
        return echo(request)

    server = await servers(handler, num_io_threads=2, queued_max_requests=1,
                           max_inflight_per_connection=3)
    conns = [await connect(server) for _ in range(20)]
    per_conn = 40

    async def client(n, reader, writer):
        payloads = [f"{n}:{i}".encode() * (1 + i % 5) for i in range(per_conn)]
        writer.write(b"".join(request_frame(n * 1000 + i, p) for i, p in enumerate(payloads)))
        for i, p in enumerate(payloads):
            assert await read_response(reader) == (n * 1000 + i, p)

    await asyncio.gather(*(client(n, r, w) for n, (r, w) in enumerate(conns)))
    assert max_seen <= 1
    assert server.request_channel.blocked_total > 0  # the bound was actually hit


async def test_closed_connection_waiting_for_room_is_skipped(servers, connect):
    gate = asyncio.Event()
    handled: list[int] = []

    async def handler(request):
        handled.append(request.correlation_id)
        await gate.wait()
        return echo(request)

    server = await servers(handler, num_io_threads=1, queued_max_requests=1)
    a = await connect(server)
    a[1].write(request_frame(1))
    await until(lambda: handled == [1])
    b = await connect(server)
    b[1].write(request_frame(2))
    await until(lambda: server.request_channel.size == 1)
    c = await connect(server)
    c[1].write(request_frame(3))
    await until(lambda: server.request_channel.blocked_total == 1)
    # a paused connection does not see its client leave, so the broker closes it (as the
    # idle sweep would) while it waits for room
    list(server.connections.values())[-1].close()
    await assert_closed(c[0])
    d = await connect(server)
    d[1].write(request_frame(4))
    await until(lambda: server.request_channel.blocked_total == 2)
    gate.set()
    assert await read_response(a[0]) == (1, b"")
    assert await read_response(b[0]) == (2, b"")
    assert await read_response(d[0]) == (4, b"")
    assert handled == [1, 2, 4]


def test_queued_max_requests_must_be_positive():
    with pytest.raises(ValueError, match="queued.max.requests"):
        SocketServer([Endpoint("PLAINTEXT", "127.0.0.1", 0)], echo, queued_max_requests=0)


# ---- socket.send.buffer.bytes / socket.receive.buffer.bytes --------------------------------
def os_default_buffers() -> tuple[int, int]:
    """SO_SNDBUF/SO_RCVBUF of a freshly accepted loopback socket with no options set."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        with socket.create_connection(listener.getsockname()):
            accepted, _ = listener.accept()
            with accepted:
                return (accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                        accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))


async def test_socket_buffer_sizes_applied_to_accepted_sockets(servers, connect):
    server = await servers(socket_send_buffer_bytes=24576, socket_receive_buffer_bytes=40960)
    reader, writer = await connect(server)
    writer.write(request_frame(1))
    assert await read_response(reader) == (1, b"")
    sock = server_socket(server)
    # Linux doubles the value for bookkeeping overhead; other systems report it as set
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) in (24576, 2 * 24576)
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) in (40960, 2 * 40960)


async def test_minus_one_keeps_os_default_buffers(servers, connect):
    default_snd, default_rcv = os_default_buffers()
    server = await servers(socket_send_buffer_bytes=-1, socket_receive_buffer_bytes=-1)
    await connect(server)
    await until(lambda: server.connection_count == 1)
    sock = server_socket(server)
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == default_snd
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == default_rcv
    assert default_snd not in (24576, 2 * 24576)  # the other test's values would show


# ---- max.connections.per.ip / max.connections ---------------------------------------------
async def test_max_connections_per_ip_closes_the_extra_connection(servers, connect):
    server = await servers(max_connections_per_ip=2)
    first = await connect(server)
    second = await connect(server)
    await until(lambda: server.connection_count == 2)
    third = await connect(server)
    await assert_closed(third[0])
    assert server.limit_closed == 1
    assert server.connections_from("127.0.0.1") == 2
    for n, (reader, writer) in enumerate((first, second)):
        writer.write(request_frame(n))
        assert await read_response(reader) == (n, b"")
    first[1].close()  # frees a slot for this IP
    await until(lambda: server.connections_from("127.0.0.1") == 1)
    fourth = await connect(server)
    fourth[1].write(request_frame(4))
    assert await read_response(fourth[0]) == (4, b"")
    assert server.limit_closed == 1


async def test_max_connections_closes_connections_beyond_the_broker_limit(servers, connect):
    server = await servers(max_connections=1)
    first = await connect(server)
    await until(lambda: server.connection_count == 1)
    second = await connect(server)
    await assert_closed(second[0])
    first[1].write(request_frame(1))
    assert await read_response(first[0]) == (1, b"")
    first[1].close()
    await until(lambda: server.connection_count == 0)
    third = await connect(server)
    third[1].write(request_frame(3))
    assert await read_response(third[0]) == (3, b"")
    assert server.limit_closed == 1
    assert server.accepted_total == 2
