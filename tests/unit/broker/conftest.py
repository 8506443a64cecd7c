"""Fixtures shared by the network-layer tests: SocketServers on 127.0.0.1 ephemeral ports and
client connections to them, all closed at teardown."""

import asyncio

import pytest

from broker.config import Endpoint
from broker.network import SocketServer


@pytest.fixture
async def socket_servers():
    """``await socket_servers(handler, processor_class=None, **kw)`` -> a started SocketServer
    on ``PLAINTEXT://127.0.0.1:0`` (``kw`` go to SocketServer); every one stopped at teardown."""
    started = []

    async def make(handler, processor_class=None, **kw):
        server = SocketServer([Endpoint("PLAINTEXT", "127.0.0.1", 0)], handler, **kw)
        if processor_class is not None:
            server.processor_class = processor_class
        await server.start()
        started.append(server)
        return server

    yield make
    for s in started:
        await s.stop()


@pytest.fixture
async def connect():
    """``await connect(server)`` -> (reader, writer) to the server's port; closed at teardown."""
    writers = []

    async def open_one(server):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port())
        writers.append(writer)
        return reader, writer

    yield open_one
    for w in writers:
        w.close()
        try:
            await w.wait_closed()
        except OSError:
            pass
