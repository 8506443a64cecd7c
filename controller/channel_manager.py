"""ControllerChannelManager: the ZooKeeper controller's connections to every live broker.

Kafka's ControllerChannelManager + RequestSendThread on asyncio: one FIFO queue, one task and
one connection (:class:`client.aio_connection.BrokerConnection`, opened by ``opener(host,
port)`` when given: TLS/SASL inter-broker listeners) per live broker, to the broker's endpoint
on the inter-broker listener (``inter.broker.listener.name``, else the listener named by
``security.inter.broker.protocol``). Each request is sent, one at a
time per broker, and retried (reconnecting, 100 ms apart) until it gets a response or the
broker is removed (it died: the next registration adds it again with a fresh queue). The
response goes to the request's callback, which only enqueues a controller event.

Only the controller's event task calls ``send_request``/``add_broker``/``remove_broker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from client.aio_connection import BrokerConnection
from controller.zk_data import BrokerInfo

__all__ = ["ControllerChannelManager"]

log = logging.getLogger(__name__)

API_NAMES = {4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata"}
BACKOFF_S = 0.1
BARRIER = -1  # a queue item that only marks the requests before it as answered
SLOW_S = 1.0  # a request answered later than this is logged (with its time in the queue)


@dataclass
class _QueueItem:
    api_key: int
    version: int
    request: Any
    callback: Callable[[Any], None] | None
    queued: float = 0.0  # loop time it was queued at (s)


class _BrokerState:
    def __init__(self, broker: BrokerInfo) -> None:
        self.broker = broker
        self.queue: asyncio.Queue[_QueueItem] = asyncio.Queue()
        self.task: asyncio.Task | None = None
        self.conn: BrokerConnection | None = None
        self.removed = False


class ControllerChannelManager:
    """``listener_name`` picks each broker's endpoint; ``socket_timeout_ms`` bounds connects
    and responses (``controller.socket.timeout.ms``)."""

    def __init__(self, controller_id: int, controller_epoch: Callable[[], int],
                 listener_name: str, socket_timeout_ms: int = 30000,
                 opener: Callable[[str, int], Callable[[], Any]] | None = None) -> None:
        self.controller_id = controller_id
        self.opener = opener
        self.controller_epoch = controller_epoch
        self.listener_name = listener_name
        self.timeout_s = max(0.1, socket_timeout_ms / 1000.0)
        self._brokers: dict[int, _BrokerState] = {}
        self.sent = 0

    def startup(self, brokers: list[BrokerInfo]) -> None:
        for b in brokers:
            self.add_broker(b)

    async def shutdown(self) -> None:
        for broker_id in list(self._brokers):
            await self.remove_broker(broker_id)

    def queue_size(self) -> int:
        return sum(s.queue.qsize() for s in self._brokers.values())

    def add_broker(self, broker: BrokerInfo) -> None:
        if broker.id in self._brokers:
            return
        state = _BrokerState(broker)
        self._brokers[broker.id] = state
        state.task = asyncio.get_running_loop().create_task(
            self._send_loop(state), name=f"controller-{self.controller_id}-to-broker-{broker.id}")

    async def remove_broker(self, broker_id: int) -> None:
        state = self._brokers.pop(broker_id, None)
        if state is None:
            return
        state.removed = True
        while not state.queue.empty():  # nothing queued for it will be answered now
            item = state.queue.get_nowait()
            if item.api_key == BARRIER and not item.request.done():
                item.request.set_result(None)
        if state.task is not None:
            state.task.cancel()
            # never wait long: the controller's event queue is blocked meanwhile
            await asyncio.wait({state.task}, timeout=1.0)
        if state.conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(state.conn.close(), 1.0)

    def send_request(self, broker_id: int, api_key: int, version: int, request: Any,
                     callback: Callable[[Any], None] | None = None) -> None:
        state = self._brokers.get(broker_id)
        if state is None:
            log.warning("Not sending request %s with controllerId=%d, controllerEpoch=%d to "
                        "broker %d, since it is offline.", API_NAMES.get(api_key, api_key),
                        self.controller_id, self.controller_epoch(), broker_id)
            return
        state.queue.put_nowait(_QueueItem(api_key, version, request, callback,
                                          asyncio.get_running_loop().time()))

    async def wait_answered(self, timeout_s: float) -> bool:
        """Wait until every request queued so far has been answered (or dropped: a broker
        removed), at most ``timeout_s``; True when all were. A failover waits so between
        its two waves (see ``KafkaController._start_state_machines``)."""
        loop = asyncio.get_running_loop()
        waits = []
        for state in self._brokers.values():
            fut = loop.create_future()
            state.queue.put_nowait(_QueueItem(BARRIER, 0, fut, None, loop.time()))
            waits.append(fut)
        if not waits:
            return True
        _done, pending = await asyncio.wait(waits, timeout=timeout_s)
        for fut in pending:
            fut.cancel()
        return not pending

    def _endpoint(self, broker: BrokerInfo):
        for e in broker.endpoints:
            if e.listener_name == self.listener_name:
                return e
        return None

    async def _connect(self, state: _BrokerState, endpoint) -> None:
        """Open ``state``'s connection unless it is open (raises OSError, ConnectionError
        or TimeoutError)."""
        if state.conn is None or not state.conn.connected:
            state.conn = BrokerConnection(
                endpoint.host, endpoint.port, f"controller-{self.controller_id}",
                timeout_s=self.timeout_s,
                opener=self.opener(endpoint.host, endpoint.port) if self.opener else None)
            await state.conn.connect()
            log.info("Controller %d connected to broker %d (%s:%d) for sending state change "
                     "requests", self.controller_id, state.broker.id, endpoint.host,
                     endpoint.port)

    async def _send_loop(self, state: _BrokerState) -> None:
        broker = state.broker
        endpoint = self._endpoint(broker)
        warned = False
        loop = asyncio.get_running_loop()
        if endpoint is not None:
            # connect now, not at the first request: a failover's first requests come
            # seconds later, from a loop too busy by then to open connections quickly
            try:
                await self._connect(state, endpoint)
            except Exception:  # noqa: BLE001 - the first request connects again, and reports
                if state.conn is not None:
                    await state.conn.close()
                    state.conn = None  # tried again, with warnings, at the first request
        while not state.removed:
            item = await state.queue.get()
            if item.api_key == BARRIER:
                if not item.request.done():
                    item.request.set_result(None)
                continue
            if endpoint is None:
                log.error("Broker %d has no endpoint for listener %s; dropping %s", broker.id,
                          self.listener_name, API_NAMES.get(item.api_key, item.api_key))
                continue
            while not state.removed:
                try:
                    if state.conn is None or not state.conn.connected:
                        await self._connect(state, endpoint)
                        warned = False
                    sent_at = loop.time()
                    _v, response = await state.conn.request(item.api_key, item.request,
                                                            item.version, self.timeout_s)
                    self.sent += 1
                    took = loop.time() - sent_at
                    if took >= SLOW_S:
                        log.info("%s to broker %d answered in %.0f ms (queued %.0f ms before)",
                                 API_NAMES.get(item.api_key, item.api_key), broker.id,
                                 took * 1000, (sent_at - item.queued) * 1000)
                    break
                except (OSError, ConnectionError, TimeoutError) as e:
                    if not warned:
                        log.warning("Controller %d epoch %d fails to send %s to broker %d "
                                    "(%s:%d): %s. Reconnecting to broker.", self.controller_id,
                                    self.controller_epoch(), API_NAMES.get(item.api_key),
                                    broker.id, endpoint.host, endpoint.port, e)
                        warned = True
                    if state.conn is not None:
                        await state.conn.close()
                        state.conn = None
                    await asyncio.sleep(BACKOFF_S)
            else:
                return  # removed while retrying
            if item.callback is not None:
                try:
                    item.callback(response)
                except Exception:
                    log.exception("controller response callback failed")
