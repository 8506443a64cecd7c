"""`AlterPartitionManager`: sends leaders' ISR changes to the controller (Kafka's
DefaultAlterPartitionManager, KIP-497; broker epochs KIP-903).

`submit(topic, topic_id, partition, LeaderAndIsr, controller_epoch)` queues one change and
returns an `asyncio.Future` that resolves to the controller's committed `LeaderAndIsr`, or
fails with a `KafkaError` carrying the partition's error code. A partition with a change
already queued or in flight gets OPERATION_NOT_ATTEMPTED at once (one change per partition).

One AlterPartition request is in flight at a time; it carries every queued change (grouped
by topic). The version is the highest the controller supports (v0-v3): v2+ name topics by
id (only when every queued change has one), v3 sends the ISR with broker epochs (-1: ZooKeeper
mode does not check them, as Kafka's ZK brokers send). The request goes to the controller
named by the metadata cache (UpdateMetadata's controller id) over the inter-broker listener,
through its own connection; it has no deadline of its own: a lost connection, no known
controller, or a top-level error (NOT_CONTROLLER, STALE_BROKER_EPOCH, ...) retries the same
changes after `retry_backoff_ms` until answered or `shutdown()`. A change the answer omits
stays queued and is sent again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from broker.replication.replica_state import LeaderAndIsr
from client.aio_connection import BrokerConnection, BrokerConnectionError
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import AlterPartitionRequest

__all__ = ["AlterPartitionManager", "AlterPartitionItem"]

log = logging.getLogger(__name__)

API_KEY = 56
ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class AlterPartitionItem:
    topic: str
    topic_id: uuid.UUID | None
    partition: int
    leader_and_isr: LeaderAndIsr
    controller_epoch: int
    future: asyncio.Future


class AlterPartitionManager:
    """See the module docstring. `controller_endpoint()` -> (controller id, host, port) or
    None; `broker_epoch()` -> this broker's epoch (-1 if unknown); `connection_factory(host,
    port)` -> an unconnected `BrokerConnection`."""

    def __init__(self, broker_id: int, controller_endpoint: Callable[[], tuple | None],
                 broker_epoch: Callable[[], int] = lambda: -1, *,
                 connection_factory: Callable[[str, int], BrokerConnection] | None = None,
                 retry_backoff_ms: int = 50, max_backoff_ms: int = 1000,
                 request_timeout_ms: int = 30000) -> None:
        self.broker_id = broker_id
        self.controller_endpoint = controller_endpoint
        self.broker_epoch = broker_epoch
        self.connection_factory = connection_factory or (
            lambda host, port: BrokerConnection(host, port, f"broker-{broker_id}-alter-partition",
                                                timeout_s=request_timeout_ms / 1000))
        self.retry_backoff_ms = retry_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.unsent: dict[tuple[str, int], AlterPartitionItem] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._conn: BrokerConnection | None = None
        self._conn_target: tuple | None = None
        self.requests_sent = 0
        self._stopping = False

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None and not self._stopping:
            self._task = asyncio.create_task(self._run(), name="alter-partition-manager")

    async def shutdown(self) -> None:
        self._stopping = True
        self._wakeup.set()
        task, self._task = self._task, None
        if task is not None:
            # the flag ends the loop even if a cancellation is lost (asyncio.wait_for in
            # Python 3.11 can swallow one that races with its inner result)
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=1)
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        for item in self.unsent.values():
            if not item.future.done():
                item.future.cancel()
        self.unsent.clear()

    # --- submit ---------------------------------------------------------------------------
    def submit(self, topic: str, topic_id: uuid.UUID | None, partition: int,
               leader_and_isr: LeaderAndIsr, controller_epoch: int = -1) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        key = (topic, partition)
        if key in self.unsent:
            fut.set_exception(KafkaError(ErrorCode.OPERATION_NOT_ATTEMPTED,
                                         f"an ISR change for {topic}-{partition} is already "
                                         "queued"))
            return fut
        self.unsent[key] = AlterPartitionItem(topic, topic_id, partition, leader_and_isr,
                                              controller_epoch, fut)
        self._wakeup.set()
        self.start()
        return fut

    # --- sending ----------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = self.retry_backoff_ms
        while not self._stopping:
            await self._wakeup.wait()
            if self._stopping:
                return
            self._wakeup.clear()
            items = [i for i in self.unsent.values() if not i.future.done()]
            for key in [k for k, i in self.unsent.items() if i.future.done()]:
                del self.unsent[key]
            if not items:
                continue
            try:
                ok = await self._send(items)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep retrying; never lose the changes
                log.warning("AlterPartition request failed: %s", e)
                ok = False
            if ok:
                backoff = self.retry_backoff_ms
                if self.unsent:
                    self._wakeup.set()
            else:
                await asyncio.sleep(backoff / 1000)
                backoff = min(backoff * 2, self.max_backoff_ms)
                self._wakeup.set()

    async def _connection(self) -> BrokerConnection | None:
        target = self.controller_endpoint()
        if target is None:
            return None
        if self._conn is not None and (self._conn_target != target or not self._conn.connected):
            await self._conn.close()
            self._conn = None
        if self._conn is None:
            conn = self.connection_factory(target[1], target[2])
            await conn.connect()
            self._conn, self._conn_target = conn, target
        return self._conn

    async def _send(self, items: list[AlterPartitionItem]) -> bool:
        """One request for `items`; True when the controller answered without a top-level
        error (the items' futures are then resolved)."""
        try:
            conn = await self._connection()
            if conn is None:
                log.debug("no controller known; AlterPartition waits")
                return False
            use_ids = all(i.topic_id not in (None, ZERO_UUID) for i in items)
            version = conn.version_for(API_KEY, max_version=None if use_ids else 1)
            request, names_by_id = self._build(items, version)
            self.requests_sent += 1
            _, resp = await conn.request(API_KEY, request, version)
        except BrokerConnectionError as e:
            log.info("AlterPartition to the controller failed (%s); retrying", e)
            if self._conn is not None:
                await self._conn.close()
                self._conn = None
            return False
        if resp.error_code != ErrorCode.NONE:
            log.warning("controller answered AlterPartition with %s; retrying",
                        _name(resp.error_code))
            if resp.error_code == ErrorCode.NOT_CONTROLLER and self._conn is not None:
                await self._conn.close()
                self._conn = None
            return False
        answers: dict[tuple[str, int], object] = {}
        for t in resp.topics:
            name = names_by_id.get(t.topic_id) if version >= 2 else t.topic_name
            if not name:
                log.error("AlterPartition response names an unknown topic %s", t)
                continue
            for p in t.partitions:
                if p.error_code != ErrorCode.NONE:
                    answers[(name, p.partition_index)] = KafkaError(
                        p.error_code, f"AlterPartition for {name}-{p.partition_index}: "
                                      f"{_name(p.error_code)}")
                elif p.leader_recovery_state not in (0, 1):
                    answers[(name, p.partition_index)] = KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR,
                        f"invalid leader recovery state {p.leader_recovery_state}")
                else:
                    answers[(name, p.partition_index)] = LeaderAndIsr(
                        p.leader_id, p.leader_epoch, tuple(p.isr), p.partition_epoch,
                        p.leader_recovery_state)
        for item in items:
            key = (item.topic, item.partition)
            answer = answers.get(key)
            if answer is None:
                log.warning("%s-%d was sent in AlterPartition but not answered; resending",
                            item.topic, item.partition)
                continue
            if self.unsent.get(key) is item:
                del self.unsent[key]
            if item.future.done():
                continue
            if isinstance(answer, KafkaError):
                item.future.set_exception(answer)
            else:
                item.future.set_result(answer)
        return True

    def _build(self, items: list[AlterPartitionItem], version: int):
        by_topic: dict[str, list[AlterPartitionItem]] = {}
        for item in items:
            by_topic.setdefault(item.topic, []).append(item)
        names_by_id: dict[uuid.UUID, str] = {}
        # partitions with the same ISR share its two arrays (the request is only encoded; a
        # broker rejoining 50,000 ISRs built 150,000 BrokerState objects: a second of CPU)
        isr_lists: dict[tuple, tuple[list, list]] = {}
        topics = []
        for name, group in by_topic.items():
            topic_id = group[0].topic_id or ZERO_UUID
            names_by_id[topic_id] = name
            parts = []
            for i in group:
                lai = i.leader_and_isr
                isr = tuple(lai.isr)
                lists = isr_lists.get(isr)
                if lists is None:
                    lists = isr_lists[isr] = (list(isr), [AlterPartitionRequest.BrokerState(
                        broker_id=b, broker_epoch=-1) for b in isr])
                new_isr, with_epochs = lists
                parts.append(AlterPartitionRequest.PartitionData(
                    partition_index=i.partition, leader_epoch=lai.leader_epoch,
                    new_isr=new_isr, new_isr_with_epochs=with_epochs,
                    leader_recovery_state=lai.leader_recovery_state,
                    partition_epoch=lai.partition_epoch))
            topics.append(AlterPartitionRequest.TopicData(topic_name=name, topic_id=topic_id,
                                                          partitions=parts))
        return AlterPartitionRequest(broker_id=self.broker_id,
                                     broker_epoch=self.broker_epoch(), topics=topics), names_by_id


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
