"""What the parts of the ZooKeeper controller share: its settings, state and znode watches.

``ControllerCore`` is the state KafkaController and its collaborators
(:mod:`controller.leadership`, :mod:`controller.reassignment`,
:mod:`controller.notifications`) work over, as Kafka's KafkaController fields its helpers
read: the settings, the ZooKeeper client, the in-memory ``ControllerContext``, the single
event queue, the request batch, the partition and replica state machines, the topic
deletion manager and, while active, the channel to the brokers. KafkaController is one and
builds the collaborators, passing itself; they never import it.
``ControllerConfig`` holds the broker settings the controller reads (Kafka key names in the
comments). ``ChildChangeWatch`` / ``NodeChangeWatch`` adapt a znode path and callbacks to the
:mod:`controller.zk_client` handler interfaces; the callbacks only enqueue controller events
(they run on kazoo's thread, handed over to the event loop by the client).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from controller.context import ControllerContext, TopicPartition
from controller.kafka_zk_client import ControllerMovedError
from controller.zk_client import ZNodeChangeHandler, ZNodeChildChangeHandler

#: the longest a failover or broker failure waits for its elections to be answered (s)
WAVE_WAIT_S = 10.0
#: a failover's or broker failure's elections reach the brokers in parts of this many
#: partitions (``coalesced_requests(flush_every=...)``), as ZooKeeper commits them
ELECTION_PART = 10_000

if TYPE_CHECKING:
    from controller.channel_manager import ControllerChannelManager
    from controller.event_manager import ControllerEventManager
    from controller.kafka_zk_client import KafkaZkClient
    from controller.partition_state_machine import PartitionStateMachine
    from controller.replica_state_machine import ReplicaStateMachine
    from controller.request_batch import ControllerBrokerRequestBatch
    from controller.topic_deletion import TopicDeletionManager


@dataclass
class ControllerConfig:
    """The broker settings the controller reads (Kafka key names in comments)."""

    broker_id: int
    inter_broker_listener_name: str = "PLAINTEXT"  # inter.broker.listener.name
    delete_topic_enable: bool = True  # delete.topic.enable
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_s: float = 300.0  # leader.imbalance.check.interval.seconds
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable
    controller_socket_timeout_ms: int = 30000  # controller.socket.timeout.ms
    #: first auto rebalance check after becoming controller (Kafka: 5 s)
    first_rebalance_delay_s: float = 5.0


class ChildChangeWatch(ZNodeChildChangeHandler):
    def __init__(self, path: str, put: Callable[[], None]) -> None:
        self.path = path
        self._put = put

    def on_child_change(self) -> None:
        self._put()


class NodeChangeWatch(ZNodeChangeHandler):
    def __init__(self, path: str, on_create=None, on_delete=None, on_change=None) -> None:
        self.path = path
        self._create, self._delete, self._change = on_create, on_delete, on_change

    def on_create(self) -> None:
        if self._create:
            self._create()

    def on_delete(self) -> None:
        if self._delete:
            self._delete()

    def on_data_change(self) -> None:
        if self._change:
            self._change()


class ControllerCore:
    """The controller's shared state. ``active_controller_id`` is -1 while unknown;
    ``channel`` is None unless this broker is the active controller. The subclass sets
    ``event_manager``, ``batch``, ``partition_sm``, ``replica_sm`` and ``deletion``."""

    event_manager: ControllerEventManager
    batch: ControllerBrokerRequestBatch
    partition_sm: PartitionStateMachine
    replica_sm: ReplicaStateMachine
    deletion: TopicDeletionManager

    def __init__(self, config: ControllerConfig, zk: KafkaZkClient) -> None:
        self.config = config
        self.zk = zk
        self.broker_id = config.broker_id
        self.active_controller_id = -1
        self.context = ControllerContext()
        self.channel: ControllerChannelManager | None = None

    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id

    @property
    def epoch(self) -> int:
        return self.context.epoch

    def _send(self, broker_id: int, api_key: int, version: int, request, callback) -> None:
        if self.channel is not None:
            self.channel.send_request(broker_id, api_key, version, request, callback)

    async def wait_requests_answered(self) -> None:
        """Give the requests sent so far the brokers' attention before more work: wait
        until each live broker answered them, at most `WAVE_WAIT_S` (or the controller's
        socket timeout when shorter). Between a failover's or a broker failure's two waves
        (the elections, then the ISR shrinks): the controller's own broker applies the
        elections on the loop the controller would otherwise fill with the second wave's
        work (at 100,000 partitions RF 3 its LeaderAndIsr of 50,000 elections took 7.9 s
        instead of 2-3 s, and its UpdateMetadata came 10 s later than the other broker's)."""
        if self.channel is not None:
            await self.channel.wait_answered(
                min(WAVE_WAIT_S, self.config.controller_socket_timeout_ms / 1000.0))

    def send_update_metadata_request(self, brokers: list[int],
                                     partitions: list[TopicPartition] = ()) -> None:
        """UpdateMetadata to ``brokers`` for ``partitions`` (empty = no partition states)."""
        self.batch.new_batch()
        self.batch.add_update_metadata(brokers, partitions)
        self.batch.send_requests_to_brokers(self.context.epoch)

    @contextlib.asynccontextmanager
    async def coalesced_requests(self, flush_every: int = 0) -> AsyncIterator[None]:
        """The requests to brokers of the state changes inside go as one batch at the end
        (see :mod:`controller.request_batch`), or in parts of ``flush_every`` partitions
        (> 0) where the state machines call ``batch.maybe_flush``. A ControllerMovedError
        drops them (the state machines cleared the batch already); any other error still
        sends what was decided, as each step would have."""
        batch = self.batch
        batch.hold(flush_every)
        try:
            yield
        except ControllerMovedError:
            if batch.release():
                batch.clear()
            raise
        except BaseException:
            if batch.release():
                batch.send_requests_to_brokers(self.context.epoch)
            raise
        if batch.release():
            batch.send_requests_to_brokers(self.context.epoch)
