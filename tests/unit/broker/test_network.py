"""SocketServer/Processor/RequestChannel on 127.0.0.1 ephemeral ports with dummy handlers."""

import asyncio
import os
import struct

import pytest

from broker.config import Endpoint
from broker.network import DataReceivedProcessor, SocketServer
from broker.request_channel import FileSlice, Response
from protocol.frames import encode_frame

pytestmark = pytest.mark.timeout(30)

ECHO, NO_RESPONSE, CLOSE, RAISE = 0, 1, 2, 3  # api_key tells the dummy handler what to do


def request_frame(api_key: int, correlation_id: int, body: bytes = b"", version: int = 0):
    return encode_frame(struct.pack(">hhi", api_key, version, correlation_id) + body)


async def read_response(reader):
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    body = await reader.readexactly(size)
    return struct.unpack_from(">i", body)[0], body[4:]


async def assert_closed(reader, timeout=5.0):
    data = await asyncio.wait_for(reader.read(1 << 20), timeout)
    while data:  # any bytes still in flight, then EOF
        data = await asyncio.wait_for(reader.read(1 << 20), timeout)


def echo_response(request):
    return Response([struct.pack(">i", request.correlation_id), request.frame[8:]])


async def basic_handler(request):
    if request.api_key == NO_RESPONSE:
        return None
    if request.api_key == CLOSE:
        return Response.close_connection()
    if request.api_key == RAISE:
        raise RuntimeError("handler bug")
    return echo_response(request)


@pytest.fixture
def make_server(socket_servers):
    async def make(handler=basic_handler, processor_class=None, **kw):
        kw.setdefault("num_io_threads", 4)
        return await socket_servers(handler, processor_class, **kw)

    return make


async def test_echo_round_trip_and_request_fields(make_server, connect):
    seen = []

    async def handler(request):
        seen.append(request)
        return echo_response(request)

    server = await make_server(handler)
    reader, writer = await connect(server)
    writer.write(request_frame(ECHO, 42, b"payload", version=3))
    assert await read_response(reader) == (42, b"payload")
    (req,) = seen
    assert (req.api_key, req.api_version, req.correlation_id, req.sequence) == (ECHO, 3, 42, 0)
    assert req.listener == "PLAINTEXT" and req.received_ns > 0
    assert req.connection_id in server.connections
    writer.close()


async def test_pipelined_responses_leave_in_request_order(make_server, connect):
    finished = []

    async def handler(request):
        await asyncio.sleep((5 - request.correlation_id) * 0.03)  # earlier = slower
        finished.append(request.correlation_id)
        return echo_response(request)

    server = await make_server(handler, max_inflight_per_connection=5, num_io_threads=8)
    reader, writer = await connect(server)
    writer.write(b"".join(request_frame(ECHO, i, b"r%d" % i) for i in range(5)))
    got = [await read_response(reader) for _ in range(5)]
    assert finished == [4, 3, 2, 1, 0]  # handler really finished them out of order
    assert got == [(i, b"r%d" % i) for i in range(5)]
    writer.close()


async def test_default_handles_one_request_per_connection_at_a_time(make_server, connect):
    active, peak = 0, 0

    async def handler(request):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return echo_response(request)

    server = await make_server(handler)  # max_inflight_per_connection=1
    reader, writer = await connect(server)
    writer.write(b"".join(request_frame(ECHO, i) for i in range(5)))
    assert [(await read_response(reader))[0] for _ in range(5)] == list(range(5))
    assert peak == 1
    writer.close()


async def test_parked_futures_answer_in_request_order(make_server, connect):
    loop = asyncio.get_running_loop()
    parked = []

    def handler(request):  # a plain function parking every request
        fut = loop.create_future()
        parked.append((request, fut))
        return fut

    server = await make_server(handler)
    reader, writer = await connect(server)
    writer.write(b"".join(request_frame(ECHO, i) for i in range(3)))
    for _ in range(200):
        if len(parked) == 3:
            break
        await asyncio.sleep(0.01)
    assert len(parked) == 3  # the worker slot was freed although nothing was answered
    for request, fut in reversed(parked):
        fut.set_result(echo_response(request))
    assert [(await read_response(reader))[0] for _ in range(3)] == [0, 1, 2]
    writer.close()


async def test_no_response_is_skipped_in_order(make_server, connect):
    server = await make_server()
    reader, writer = await connect(server)
    writer.write(request_frame(NO_RESPONSE, 1) + request_frame(ECHO, 2) +
                 request_frame(NO_RESPONSE, 3) + request_frame(ECHO, 4))
    assert (await read_response(reader))[0] == 2
    assert (await read_response(reader))[0] == 4
    writer.close()


async def test_close_response_after_earlier_responses(make_server, connect):
    server = await make_server()
    reader, writer = await connect(server)
    writer.write(request_frame(ECHO, 1) + request_frame(CLOSE, 2) + request_frame(ECHO, 3))
    assert (await read_response(reader))[0] == 1
    assert await asyncio.wait_for(reader.read(100), 5) == b""  # closed, 3 never answered
    writer.close()


async def test_handler_exception_closes_only_that_connection(make_server, connect):
    server = await make_server()
    r1, w1 = await connect(server)
    r2, w2 = await connect(server)
    w1.write(request_frame(RAISE, 1))
    await assert_closed(r1)
    w2.write(request_frame(ECHO, 9))
    assert (await read_response(r2))[0] == 9
    w1.close()
    w2.close()


async def test_oversize_frame_closes_only_that_connection(make_server, connect):
    server = await make_server(socket_request_max_bytes=1000)
    r_bad, w_bad = await connect(server)
    r_ok, w_ok = await connect(server)
    w_ok.write(request_frame(ECHO, 1, b"x" * 900))
    assert await read_response(r_ok) == (1, b"x" * 900)
    w_bad.write(struct.pack(">i", 1001))  # prefix only: refused before any body arrives
    await assert_closed(r_bad)
    w_ok.write(request_frame(ECHO, 2, b"still fine"))
    assert await read_response(r_ok) == (2, b"still fine")
    assert server.malformed_closed == 1
    w_bad.close()
    w_ok.close()


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # size 0x47455420: too large
    b"\xff\xff\xff\xfe" + os.urandom(64),  # negative size
    b"\x00\x00\x00\x03abc",  # frame too short for a request header
    b"\x00\x00\x00\x00",  # empty frame
])
async def test_garbage_closes_connection_and_server_keeps_serving(make_server, connect, garbage):
    server = await make_server()
    reader, writer = await connect(server)
    writer.write(garbage)
    await assert_closed(reader)
    r2, w2 = await connect(server)
    w2.write(request_frame(ECHO, 5))
    assert (await read_response(r2))[0] == 5
    writer.close()
    w2.close()


async def test_idle_sweep_with_manual_clock(make_server, connect):
    now = [1_000_000.0]
    server = await make_server(connections_max_idle_ms=60_000, clock=lambda: now[0])
    reader, writer = await connect(server)
    writer.write(request_frame(ECHO, 1))
    await read_response(reader)
    now[0] += 60_000  # exactly the limit: not idle yet
    assert server.sweep_idle() == 0
    writer.write(request_frame(ECHO, 2))  # activity resets the idle time
    await read_response(reader)
    now[0] += 60_000
    assert server.sweep_idle() == 0
    now[0] += 1
    assert server.sweep_idle() == 1
    await assert_closed(reader)
    assert server.idle_closed == 1
    writer.close()


async def test_idle_sweep_skips_connection_with_request_in_progress(make_server, connect):
    now = [0.0]
    release = asyncio.Event()

    async def handler(request):
        await release.wait()
        return echo_response(request)

    server = await make_server(handler, connections_max_idle_ms=10, clock=lambda: now[0])
    reader, writer = await connect(server)
    writer.write(request_frame(ECHO, 7))
    for _ in range(200):
        if server.request_channel.size == 0 and server.connections:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    now[0] += 1000
    assert server.sweep_idle() == 0
    release.set()
    assert (await read_response(reader))[0] == 7
    writer.close()


async def test_idle_sweep_closes_client_that_stopped_reading(make_server, connect, data_file):
    path, data = data_file
    fd = os.open(path, os.O_RDONLY)
    now = [0.0]
    try:
        async def handler(request):
            return Response([struct.pack(">i", request.correlation_id)] +
                            [FileSlice(fd, 0, len(data))] * 16)  # ~50 MB: cannot all fit

        server = await make_server(handler, connections_max_idle_ms=1000, clock=lambda: now[0])
        reader, writer = await connect(server)
        writer.write(request_frame(ECHO, 1))
        await asyncio.sleep(0.5)  # the server fills the socket buffers, then waits
        (proc,) = server.connections.values()
        assert proc.unanswered == 1  # stuck mid-response
        now[0] += 1001
        assert server.sweep_idle() == 1
        for _ in range(300):
            if server.connection_count == 0:
                break
            await asyncio.sleep(0.01)
        assert server.connection_count == 0
    finally:
        os.close(fd)


async def test_idle_connection_closed_by_periodic_sweep(make_server, connect):
    server = await make_server(connections_max_idle_ms=100)
    reader, writer = await connect(server)
    writer.write(request_frame(ECHO, 1))
    await read_response(reader)
    await assert_closed(reader, timeout=3)
    assert server.idle_closed == 1 and server.connection_count == 0
    writer.close()


@pytest.fixture
def data_file(tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    return path, data


class _Records:  # shaped like storage's FileRecords
    def __init__(self, slices):
        self.slices = slices

    def __len__(self):
        return sum(s[2] for s in self.slices)


async def _file_slice_round_trip(make_server, connect, data_file, **kw):
    path, data = data_file
    f = open(path, "rb")  # noqa: SIM115 - closed below
    fd = os.open(path, os.O_RDONLY)
    try:
        async def handler(request):
            return Response([struct.pack(">i", request.correlation_id), b"<",
                             FileSlice(f, 1000, 2_000_000), b"|", (fd, 5, 10),
                             _Records([(fd, 2_500_000, len(data) - 2_500_000), (f, 0, 0)]),
                             b">"])

        server = await make_server(handler, **kw)
        reader, writer = await connect(server)
        writer.write(request_frame(ECHO, 1) + request_frame(ECHO, 2))
        expect = (b"<" + data[1000:2_001_000] + b"|" + data[5:15] + data[2_500_000:] + b">")
        assert await read_response(reader) == (1, expect)
        assert await read_response(reader) == (2, expect)
        writer.close()
    finally:
        f.close()
        os.close(fd)


async def test_file_slices_sent_with_sendfile_arrive_intact(make_server, connect, data_file):
    await _file_slice_round_trip(make_server, connect, data_file)


async def test_file_slices_with_pread_only(make_server, connect, data_file):
    await _file_slice_round_trip(make_server, connect, data_file, use_sendfile=False)


async def test_file_slices_to_a_slow_reader(make_server, connect, data_file):
    """The socket fills up: the direct send waits for writability and resumes in order."""
    path, data = data_file
    fd = os.open(path, os.O_RDONLY)
    try:
        async def handler(request):
            return Response([struct.pack(">i", request.correlation_id),
                             FileSlice(fd, 0, len(data))])

        server = await make_server(handler)
        reader, writer = await connect(server)
        writer.write(b"".join(request_frame(ECHO, i) for i in range(3)))
        await asyncio.sleep(0.2)  # let the server fill every buffer on the way
        for i in range(3):
            assert await read_response(reader) == (i, data)
    finally:
        os.close(fd)


async def test_client_gone_during_file_send(make_server, connect, data_file):
    path, data = data_file
    fd = os.open(path, os.O_RDONLY)
    try:
        async def handler(request):
            return Response([struct.pack(">i", request.correlation_id),
                             FileSlice(fd, 0, len(data))] * 4)

        server = await make_server(handler)
        reader, writer = await connect(server)
        writer.write(request_frame(ECHO, 1))
        await reader.readexactly(100_000)
        writer.transport.abort()  # RST while the server is mid-response
        for _ in range(300):
            if server.connection_count == 0:
                break
            await asyncio.sleep(0.01)
        assert server.connection_count == 0
        small = await make_server()
        r2, w2 = await connect(small)
        w2.write(request_frame(ECHO, 2))
        assert (await read_response(r2))[0] == 2
    finally:
        os.close(fd)


async def test_backpressure_pauses_reading_and_resumes(make_server, connect):
    release = asyncio.Event()

    async def handler(request):
        await release.wait()
        return echo_response(request)

    server = await make_server(handler, max_queued_requests_per_connection=4)
    reader, writer = await connect(server)
    body = b"z" * 100_000
    writer.write(b"".join(request_frame(ECHO, i, body) for i in range(50)))
    await asyncio.sleep(0.3)
    (proc,) = server.connections.values()
    # reading paused after the read that crossed the limit (one 256 KiB scratch at most):
    # the rest of the 5 MB waits in the socket buffers
    assert 4 <= proc.unanswered <= 8
    assert server.request_channel.size == 0
    release.set()
    for i in range(50):
        assert await read_response(reader) == (i, body)


async def test_stop_closes_connections_and_refuses_new_ones(make_server, connect):
    server = await make_server()
    reader, writer = await connect(server)
    writer.write(request_frame(ECHO, 1))
    await read_response(reader)
    port = server.port()
    await server.stop()
    await assert_closed(reader)
    assert server.connection_count == 0
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    writer.close()


async def test_client_gone_before_its_response(make_server, connect):
    release = asyncio.Event()
    started = asyncio.Event()

    async def handler(request):
        started.set()
        await release.wait()
        return echo_response(request)

    server = await make_server(handler)
    reader, writer = await connect(server)
    writer.write(request_frame(ECHO, 1))
    await asyncio.wait_for(started.wait(), 5)
    writer.close()
    for _ in range(200):
        if server.connection_count == 0:
            break
        await asyncio.sleep(0.01)
    assert server.connection_count == 0
    release.set()  # the response has nowhere to go: dropped quietly
    await asyncio.sleep(0.05)
    r2, w2 = await connect(server)
    w2.write(request_frame(ECHO, 2))
    assert (await read_response(r2))[0] == 2


async def test_failed_parked_future_closes_connection(make_server, connect):
    loop = asyncio.get_running_loop()

    def handler(request):
        fut = loop.create_future()
        if request.correlation_id == 1:
            fut.set_result(echo_response(request))
        else:
            loop.call_later(0.01, fut.set_exception, RuntimeError("purgatory bug"))
        return fut

    server = await make_server(handler)
    reader, writer = await connect(server)
    writer.write(request_frame(ECHO, 1) + request_frame(ECHO, 2))
    assert (await read_response(reader))[0] == 1
    await assert_closed(reader)


async def test_config_endpoints_are_accepted(make_server, connect):
    from broker.config import KafkaConfig

    config = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0"})
    server = SocketServer(config.listeners, basic_handler,
                          socket_request_max_bytes=config.socket_request_max_bytes,
                          num_io_threads=config.num_io_threads,
                          connections_max_idle_ms=config.connections_max_idle_ms)
    await server.start()
    try:
        assert server.bound_endpoints[0].port == server.port("plaintext") > 0
        reader, writer = await connect(server)
        writer.write(request_frame(ECHO, 3))
        assert (await read_response(reader))[0] == 3
    finally:
        await server.stop()


async def test_data_received_processor_same_behaviour(make_server, connect):
    server = await make_server(processor_class=DataReceivedProcessor,
                               socket_request_max_bytes=300_000)
    reader, writer = await connect(server)
    big = os.urandom(250_000)
    writer.write(request_frame(ECHO, 1, big) + request_frame(NO_RESPONSE, 2) +
                 request_frame(ECHO, 3, b"s"))
    assert await read_response(reader) == (1, big)
    assert await read_response(reader) == (3, b"s")
    writer.write(struct.pack(">i", 300_001))
    await assert_closed(reader)


async def test_bound_endpoint_keeps_the_configured_endpoint():
    """The network layer uses broker.config's Endpoint: the bound one differs only by the
    real port (listener name, host and security protocol kept)."""
    ep = Endpoint("INTERNAL", "127.0.0.1", 0, "PLAINTEXT")
    server = SocketServer([ep], lambda request: None)
    await server.start()
    try:
        bound = server.bound_endpoints[0]
        assert bound.port > 0 and bound == Endpoint("INTERNAL", "127.0.0.1",
                                                    server.port("internal"), "PLAINTEXT")
        assert str(bound) == f"INTERNAL://127.0.0.1:{bound.port}"
    finally:
        await server.stop()


def test_response_rejects_bad_parts():
    with pytest.raises(TypeError):
        Response([object()])
    with pytest.raises(ValueError):
        Response([FileSlice(0, -1, 5)])
    assert Response(b"abc").size == 3 and not Response(b"abc").has_file_parts
