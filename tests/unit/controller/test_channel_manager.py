"""ControllerChannelManager.wait_answered against a broker stand-in on a loopback socket:
it answers ApiVersions at once and UpdateMetadata when the test lets it."""

import asyncio
import struct

from broker.config import Endpoint
from controller.channel_manager import ControllerChannelManager
from controller.zk_data import BrokerInfo
from protocol import api
from protocol.headers import decode_request_header, encode_response_header, \
    response_header_version

API_VERSIONS, UPDATE_METADATA = 18, 6


class _Broker:
    """Answers each UpdateMetadata once ``release`` is set; counts what it received."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.received = 0
        self.server = None
        self.writers: list = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer) -> None:
        self.writers.append(writer)
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header, _ = decode_request_header(frame)
                spec = api.API_KEYS[header.api_key]
                if header.api_key == API_VERSIONS:
                    body = spec.response_cls(error_code=0, api_keys=[
                        spec.response_cls.ApiVersion(api_key=k, min_version=s.min_version,
                                                     max_version=s.max_version)
                        for k, s in api.API_KEYS.items()])
                else:
                    self.received += 1
                    await self.release.wait()
                    body = spec.response_cls(error_code=0)
                out = encode_response_header(
                    header.correlation_id,
                    response_header_version(header.api_key, header.api_version)) + \
                    body.encode(header.api_version)
                writer.write(struct.pack(">i", len(out)) + out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        """Every connection closed and its handler finished, then the listener."""
        self.release.set()
        for w in self.writers:
            w.close()
        self.server.close()
        await self.server.wait_closed()
        await asyncio.sleep(0.05)  # the handlers see their connections end


def _update_metadata():
    return api.API_KEYS[UPDATE_METADATA].request_cls(controller_id=1, controller_epoch=1,
                                                     broker_epoch=1)


async def test_wait_answered_waits_for_the_answers_and_is_bounded():
    broker = _Broker()
    port = await broker.start()
    channel = ControllerChannelManager(1, lambda: 1, "PLAINTEXT", 5000)
    channel.startup([BrokerInfo(2, (Endpoint("PLAINTEXT", "127.0.0.1", port),))])
    answered = []
    try:
        assert await channel.wait_answered(1.0)  # nothing queued
        channel.send_request(2, UPDATE_METADATA, 8, _update_metadata(), answered.append)
        assert not await channel.wait_answered(0.3)  # not answered yet: bounded
        assert broker.received == 1 and not answered
        channel.send_request(2, UPDATE_METADATA, 8, _update_metadata(), answered.append)
        waiting = asyncio.ensure_future(channel.wait_answered(5.0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        broker.release.set()
        assert await waiting and len(answered) == 2
    finally:
        await channel.shutdown()
        await broker.stop()


async def test_wait_answered_ends_when_the_broker_is_removed():
    broker = _Broker()
    port = await broker.start()
    channel = ControllerChannelManager(1, lambda: 1, "PLAINTEXT", 5000)
    channel.startup([BrokerInfo(2, (Endpoint("PLAINTEXT", "127.0.0.1", port),))])
    try:
        channel.send_request(2, UPDATE_METADATA, 8, _update_metadata())
        channel.send_request(2, UPDATE_METADATA, 8, _update_metadata())
        waiting = asyncio.ensure_future(channel.wait_answered(30.0))
        await asyncio.sleep(0.2)
        await channel.remove_broker(2)
        assert await asyncio.wait_for(waiting, 2.0)
    finally:
        await channel.shutdown()
        await broker.stop()


async def test_connections_open_at_startup_and_serve_the_first_request():
    """Each broker's connection opens when the channel starts, before any request (a
    failover's first requests come seconds later, from a busy loop); the requests then go
    over it. A broker not listening at startup gets its requests once it listens."""
    broker = _Broker()
    port = await broker.start()
    idle = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    late = idle.sockets[0].getsockname()[1]
    idle.close()
    await idle.wait_closed()  # nothing listens on `late` now
    channel = ControllerChannelManager(1, lambda: 1, "PLAINTEXT", 5000)
    channel.startup([BrokerInfo(2, (Endpoint("PLAINTEXT", "127.0.0.1", port),)),
                     BrokerInfo(3, (Endpoint("PLAINTEXT", "127.0.0.1", late),))])
    second = _Broker()
    try:
        for _ in range(100):
            if broker.writers:
                break
            await asyncio.sleep(0.02)
        assert len(broker.writers) == 1 and broker.received == 0  # connected, nothing sent
        broker.release.set()
        answered = []
        channel.send_request(2, UPDATE_METADATA, 8, _update_metadata(), answered.append)
        second.server = await asyncio.start_server(second._serve, "127.0.0.1", late)
        second.release.set()
        channel.send_request(3, UPDATE_METADATA, 8, _update_metadata(), answered.append)
        assert await channel.wait_answered(5.0) and len(answered) == 2
        assert len(broker.writers) == 1 and second.received == 1
    finally:
        await channel.shutdown()
        await broker.stop()
        if second.server is not None:
            await second.stop()
