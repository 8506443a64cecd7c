"""accept() failing with EMFILE: one WARNING per 10 s with a count instead of asyncio's
traceback per failed call (AcceptErrorLimiter), with a manual clock and with a real
descriptor exhaustion on 127.0.0.1."""

import asyncio
import errno
import logging
import os
import resource
import socket
import struct

import pytest

from broker.network import ACCEPT_OUT_OF_RESOURCES, AcceptErrorLimiter
from broker.request_channel import Response

pytestmark = pytest.mark.timeout(30)


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def emfile_context(sock=None) -> dict:
    return {"message": ACCEPT_OUT_OF_RESOURCES,
            "exception": OSError(errno.EMFILE, "Too many open files"), "socket": sock}


def network_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "broker.network" and r.levelno >= logging.WARNING]


async def test_one_warning_per_interval_with_count(caplog):
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    seen: list[dict] = []
    loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx))
    clock = ManualClock()
    limiter = AcceptErrorLimiter(clock)
    limiter.install(loop)
    try:
        with caplog.at_level(logging.WARNING, logger="broker.network"):
            for _ in range(500):
                loop.call_exception_handler(emfile_context())
            assert len(network_warnings(caplog)) == 1
            assert " 1 time(s)" in network_warnings(caplog)[0].getMessage()
            clock.now += 9_999
            for _ in range(300):
                loop.call_exception_handler(emfile_context())
            assert len(network_warnings(caplog)) == 1
            clock.now += 1
            loop.call_exception_handler(emfile_context())
            assert len(network_warnings(caplog)) == 2
            assert " 800 time(s)" in network_warnings(caplog)[1].getMessage()
            assert limiter.failures == 801
            # anything else reaches the handler installed before
            other = {"message": "boom", "exception": RuntimeError("x")}
            loop.call_exception_handler(other)
            enfile = dict(emfile_context(), exception=OSError(errno.ECONNRESET, "reset"))
            loop.call_exception_handler(enfile)
            assert seen == [other, enfile]
    finally:
        limiter.uninstall()
        assert loop.get_exception_handler() is not limiter
        loop.set_exception_handler(previous)


def fill_descriptors(fillers: list[int]) -> None:
    """Open /dev/null until EMFILE (the descriptors go to ``fillers``)."""
    while True:
        try:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as e:
            assert e.errno == errno.EMFILE
            return


def echo(request) -> Response:
    return Response([struct.pack(">i", request.correlation_id), request.frame[8:]])


async def test_real_emfile_logs_once_and_accepts_after_descriptors_free(socket_servers, caplog):
    server = await socket_servers(echo)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fds = len(os.listdir("/proc/self/fd"))
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setblocking(False)
    fillers: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (fds + 64, hard))
    try:
        fill_descriptors(fillers)
        with caplog.at_level(logging.WARNING):
            try:
                client.connect(("127.0.0.1", server.port()))
            except BlockingIOError:
                pass
            await asyncio.sleep(1.5)  # at least one retry by asyncio after its 1 s pause
            assert server.accept_errors.failures >= 2
            assert len(network_warnings(caplog)) == 1
            assert "Too many open files" in network_warnings(caplog)[0].getMessage()
            assert not [r for r in caplog.records if r.name == "asyncio"]
            for fd in fillers:
                os.close(fd)
            fillers.clear()
            deadline = asyncio.get_running_loop().time() + 5
            while server.connection_count == 0:
                assert asyncio.get_running_loop().time() < deadline, "never accepted"
                await asyncio.sleep(0.01)
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        client.close()


async def test_emfile_on_accept_releases_idle_segment_descriptors(socket_servers, tmp_path):
    """Segment files hold most of the broker's descriptors: when accept() runs out, the
    acceptor's hook (wired by the broker) gives idle ones back to the descriptor cache and
    the retry a second later accepts the connection, with nothing else freed."""
    from storage.config import LogConfig
    from storage.descriptor_cache import EMERGENCY_RELEASE, descriptor_cache
    from storage.log_manager import LogManager

    mgr = LogManager([str(tmp_path / "data")], LogConfig(), broker_id=1, cluster_id="c")
    mgr.load_all()
    for p in range(EMERGENCY_RELEASE):
        mgr.get_or_create_log(("t", p))  # each holds its active segment's .log open
    server = await socket_servers(echo)
    server.accept_errors.on_failure = lambda: descriptor_cache().release_idle(EMERGENCY_RELEASE)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setblocking(False)
    fillers: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 32, hard))
    try:
        fill_descriptors(fillers)
        try:
            client.connect(("127.0.0.1", server.port()))
        except BlockingIOError:
            pass
        deadline = asyncio.get_running_loop().time() + 5
        while server.connection_count == 0:
            assert asyncio.get_running_loop().time() < deadline, "never accepted"
            await asyncio.sleep(0.01)
        assert server.accept_errors.failures >= 1
        assert sum(lg.active_segment.holds_descriptor() for lg in mgr.all_logs().values()) \
            < EMERGENCY_RELEASE
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        client.close()
        mgr.close_all()
