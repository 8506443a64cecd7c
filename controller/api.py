"""The controller boundary: what the broker may ask of a controller, and what it is told.

Partition leadership and topic metadata reach the broker only as controller decisions shaped
like Kafka's controller-to-broker requests, generated classes from ``protocol.messages``:

- ``LeaderAndIsrRequest`` (v7 shape): become leader/follower for partitions (leader, leader
  epoch, ISR, partition epoch, replicas, ``is_new``). ``type`` is FULL (2) for the first
  decision after a controller starts (every partition this broker hosts; the broker may drop
  local partitions not listed) and INCREMENTAL (1) afterwards (KIP-516).
- ``UpdateMetadataRequest`` (v8 shape): live brokers and partition states for the
  MetadataCache. A partition whose leader is ``LEADER_DURING_DELETE`` (-2) is being deleted
  and must disappear from metadata.
- ``StopReplicaRequest`` (v4 shape): stop serving partitions; ``delete_partition`` removes
  the log; leader epoch -2 (``EPOCH_DURING_DELETE``) when the topic is deleted (KIP-570).

The broker implements :class:`BrokerMetadataListener`; a :class:`ControllerChannel` carries
decisions from a controller to brokers (in-process for the embedded controller, the network
for the ZooKeeper one). Every broker-side admin handler (CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs, IncrementalAlterConfigs, ElectLeaders, InitProducerId's id
blocks) calls a :class:`Controller`; nothing in ``broker/`` reads the metadata store.
"""

from __future__ import annotations

import abc
import uuid
from dataclasses import dataclass, field
from typing import Any

from controller.zk_data import ProducerIdBlock
from protocol.errors import ErrorCode

# AbstractControlRequest.Type (LeaderAndIsr v5+ ``type``, UpdateMetadata v8 ``type``).
TYPE_UNKNOWN, TYPE_INCREMENTAL, TYPE_FULL = 0, 1, 2

# ElectLeaders election types (KIP-460).
ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1

# Size of a producer-id block (Kafka's ProducerIdsBlock size, KIP-730).
PRODUCER_ID_BLOCK_SIZE = 1000


@dataclass
class CreatableTopic:
    """One topic of a CreateTopics request. ``-1`` partitions / replication factor mean the
    broker defaults (``num.partitions``, ``default.replication.factor``; KIP-464).
    ``replica_assignment`` maps partition -> broker ids; when given, both counts must be -1."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: dict[int, list[int]] | None = None
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass
class CreateTopicResult:
    name: str
    error_code: int
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)  # the topic's overrides


@dataclass
class DeleteTopicResult:
    """One entry per requested name or id, in request order."""

    name: str | None
    topic_id: uuid.UUID | None
    error_code: int
    error_message: str | None = None


@dataclass
class CreatePartitionsTopic:
    """Grow ``name`` to ``count`` partitions; ``assignments`` (one broker list per new
    partition) is optional."""

    name: str
    count: int
    assignments: list[list[int]] | None = None


@dataclass
class TopicResult:
    """Outcome for one topic (CreatePartitions, AlterConfigs)."""

    name: str
    error_code: int
    error_message: str | None = None


@dataclass
class ElectLeadersResult:
    topic: str
    partition: int
    error_code: int
    error_message: str | None = None


class BrokerMetadataListener(abc.ABC):
    """Implemented by the broker (ReplicaManager + MetadataCache). Decisions carrying a
    controller epoch older than the latest one applied must be ignored (Kafka answers
    STALE_CONTROLLER_EPOCH). Calls arrive one at a time, in the controller's order."""

    @abc.abstractmethod
    async def on_leader_and_isr(self, decision: Any) -> None:
        """Apply a ``LeaderAndIsrRequest``: create/open logs, become leader or follower."""

    @abc.abstractmethod
    async def on_update_metadata(self, decision: Any) -> None:
        """Apply an ``UpdateMetadataRequest`` to the MetadataCache."""

    @abc.abstractmethod
    async def on_stop_replica(self, decision: Any) -> None:
        """Apply a ``StopReplicaRequest``; delete logs where ``delete_partition``."""

    @abc.abstractmethod
    async def on_topic_config_change(self, topic: str, configs: dict[str, str]) -> None:
        """The topic's config overrides are now ``configs`` (the full set, not a delta).
        Sent before the first LeaderAndIsr of a topic that has overrides, and on every
        change."""

    async def on_broker_config_change(self, entity: str, configs: dict[str, str]) -> None:
        """Dynamic broker configs (KIP-226) of ``entity`` (``str(broker id)`` or
        ``"<default>"``) are now ``configs`` (the full set of overrides). Delivered on every
        broker at startup and on every change. Default: ignored."""
        return None


class ControllerChannel(abc.ABC):
    """Carries decisions from the controller to brokers (Kafka's ControllerChannelManager).
    ``send_*`` return once the broker has applied the decision; a broker failure is logged
    by the channel and not raised to the controller. ``send_leader_and_isr`` returns the
    broker's ``{(topic, partition): error code}`` (None when it failed or is not known)."""

    @abc.abstractmethod
    async def send_leader_and_isr(self, broker_id: int, request: Any) -> dict | None: ...

    @abc.abstractmethod
    async def send_update_metadata(self, broker_id: int, request: Any) -> None: ...

    @abc.abstractmethod
    async def send_stop_replica(self, broker_id: int, request: Any) -> None: ...

    @abc.abstractmethod
    async def send_topic_config_change(
        self, broker_id: int, topic: str, configs: dict[str, str]
    ) -> None: ...


class Controller(abc.ABC):
    """Operations the broker's admin handlers call. All results carry Kafka error codes
    (``protocol.errors.ErrorCode``); per-topic failures never raise. Implementations
    serialise all work on one queue, so results reflect a single order of events."""

    @property
    @abc.abstractmethod
    def controller_id(self) -> int: ...

    @property
    @abc.abstractmethod
    def cluster_id(self) -> str: ...

    @property
    @abc.abstractmethod
    def controller_epoch(self) -> int: ...

    @abc.abstractmethod
    async def startup(self) -> None:
        """Become controller (epoch + 1) and send the first FULL decisions."""

    @abc.abstractmethod
    async def shutdown(self) -> None: ...

    # ``timeout_ms`` (the request's): how long a ZooKeeper-mode controller waits for the
    # metadata to show the change before answering REQUEST_TIMED_OUT (embedded: applied at
    # once, ignored).

    @abc.abstractmethod
    async def create_topics(
        self, topics: list[CreatableTopic | tuple], validate_only: bool = False,
        timeout_ms: int | None = None
    ) -> list[CreateTopicResult]: ...

    @abc.abstractmethod
    async def delete_topics(
        self, names: list[str] = (), topic_ids: list[uuid.UUID] = (),
        timeout_ms: int | None = None
    ) -> list[DeleteTopicResult]: ...

    @abc.abstractmethod
    async def create_partitions(
        self, topics: list[CreatePartitionsTopic | tuple], validate_only: bool = False,
        timeout_ms: int | None = None
    ) -> list[TopicResult]: ...

    @abc.abstractmethod
    async def alter_topic_configs(
        self, name: str, configs: dict[str, str | None], validate_only: bool = False
    ) -> TopicResult: ...

    @abc.abstractmethod
    async def incremental_alter_topic_configs(
        self, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False
    ) -> TopicResult: ...

    @abc.abstractmethod
    async def elect_leaders(
        self, election_type: int, partitions: list[tuple[str, int]] | None
    ) -> list[ElectLeadersResult]: ...

    @abc.abstractmethod
    def topic_configs(self, name: str) -> dict[str, str] | None:
        """The topic's config overrides, or None for an unknown topic (Kafka's
        ConfigRepository)."""

    @abc.abstractmethod
    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        """Reserve the next block of PRODUCER_ID_BLOCK_SIZE producer ids (KIP-730)."""

    # ----- cluster (ZooKeeper mode); the defaults describe a single-node controller -----

    @property
    def is_active(self) -> bool:
        """True when this broker is the active controller (admin requests that Kafka's
        ZooKeeper mode sends to the controller answer NOT_CONTROLLER otherwise)."""
        return True

    @property
    def broker_epoch(self) -> int:
        """This broker's epoch (czxid of its registration, KIP-380); -1 when unknown."""
        return -1

    async def auto_create_topics(self, topics: list[CreatableTopic]) -> list[CreateTopicResult]:
        """Create topics on behalf of Metadata/FindCoordinator auto-creation (any broker may
        do this; Kafka's AutoTopicCreationManager). Results as ``create_topics``."""
        return await self.create_topics(topics)

    async def apply_leader_and_isr(self, request: Any) -> tuple[int, dict[tuple[str, int], int]]:
        """A LeaderAndIsr received over the wire: ``(error code, {tp: error code})``
        (STALE_CONTROLLER_EPOCH / STALE_BROKER_EPOCH fencing). A single-node controller
        never sends one, so by default every such request is stale."""
        return int(ErrorCode.STALE_CONTROLLER_EPOCH), {}

    async def apply_update_metadata(self, request: Any) -> int:
        """An UpdateMetadata received over the wire: its error code."""
        return int(ErrorCode.STALE_CONTROLLER_EPOCH)

    async def apply_stop_replica(self, request: Any) -> tuple[int, dict[tuple[str, int], int]]:
        """A StopReplica received over the wire: ``(error code, {tp: error code})``."""
        return int(ErrorCode.STALE_CONTROLLER_EPOCH), {}

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int
                                  ) -> tuple[int, list[tuple[str, int]]]:
        """ControlledShutdown (controller side): ``(error code, partitions the broker still
        leads)``; only partitions with more than one replica count (Kafka's
        partitionLeadersOnBroker), so a single node has none."""
        if broker_id != self.controller_id:
            return int(ErrorCode.BROKER_NOT_AVAILABLE), []
        return int(ErrorCode.NONE), []

    async def propagate_log_dir_event(self) -> None:
        """One of this broker's log dirs failed (KIP-112): tell the controller, which moves
        leadership of the replicas there (ZooKeeper mode: a
        ``/log_dir_event_notification`` znode). A single node has nowhere to move them."""
        return None

    async def alter_partition(self, request: Any, version: int) -> Any:
        """AlterPartition (KIP-497, controller side): an ``AlterPartitionResponse``."""
        from protocol.messages import AlterPartitionResponse

        return AlterPartitionResponse(error_code=int(ErrorCode.STALE_BROKER_EPOCH))

    async def alter_partition_reassignments(
            self, reassignments: dict[tuple[str, int], list[int] | None]
    ) -> tuple[int, dict[tuple[str, int], tuple[int, str | None]]]:
        """AlterPartitionReassignments (KIP-455): ``(top-level error, {tp: (code, msg)})``;
        a None target cancels. Default (one node): only [this broker] is a valid target."""
        out: dict[tuple[str, int], tuple[int, str | None]] = {}
        for (topic, p), target in reassignments.items():
            configs = self.topic_configs(topic)
            if configs is None:
                out[(topic, p)] = (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                   "The partition does not exist.")
            elif target is None:
                out[(topic, p)] = (int(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS), None)
            elif list(target) != [self.controller_id]:
                out[(topic, p)] = (int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                                   f"Replica assignment has brokers that are not alive. Replica "
                                   f"list: {list(target)}, live broker list: "
                                   f"[{self.controller_id}]")
            else:
                out[(topic, p)] = (int(ErrorCode.NONE), None)
        return int(ErrorCode.NONE), out

    async def list_partition_reassignments(
            self, partitions: list[tuple[str, int]] | None
    ) -> tuple[int, dict[tuple[str, int], Any]]:
        """ListPartitionReassignments: ``(error, {tp: ReplicaAssignment})`` of partitions
        being reassigned. Default: none."""
        return int(ErrorCode.NONE), {}

    # Dynamic broker configs (KIP-226; semantics owned by the API-table work): ``entity`` is
    # ``str(broker id)`` or ``"<default>"``.
    async def alter_broker_configs(self, entity: str, configs: dict[str, str | None],
                                   validate_only: bool = False) -> TopicResult:
        """Replace the entity's dynamic broker configs."""
        raise NotImplementedError("dynamic broker configs are not supported by this controller")

    async def incremental_alter_broker_configs(self, entity: str,
                                               ops: list[tuple[str, int, str | None]],
                                               validate_only: bool = False) -> TopicResult:
        """IncrementalAlterConfigs on the entity's dynamic broker configs."""
        raise NotImplementedError("dynamic broker configs are not supported by this controller")

    def broker_configs(self, entity: str) -> dict[str, str]:
        """The entity's dynamic broker configs ({} when none)."""
        return {}

    # Feature versioning (KIP-584; ZooKeeper's ``/feature`` document): the broker validates
    # updates against ``broker.features.SUPPORTED_FEATURES`` before calling.
    def finalized_features(self) -> tuple[int, dict[str, int]]:
        """``(epoch, {feature: finalized max version level})``; epoch -1 when unknown."""
        return -1, {}

    async def update_features(self, levels: dict[str, int]) -> int:
        """Set (level > 0) or remove (level 0) finalized feature levels; returns the new
        epoch. Raises OSError when the store write fails."""
        raise NotImplementedError("feature updates are not supported by this controller")

    # KIP-714 client metrics subscriptions (config resource type CLIENT_METRICS). Default:
    # kept in memory by this controller object (not persisted).
    def client_metrics_configs(self) -> dict[str, dict[str, str]]:
        """``{subscription name: configs}``."""
        return dict(getattr(self, "_client_metrics_mem", {}))

    async def set_client_metrics_configs(self, name: str, configs: dict[str, str]) -> None:
        """Store a subscription's configs (validated by the broker); {} deletes it."""
        self._remember("_client_metrics_mem", name, configs)

    def _remember(self, attr: str, name: str, configs: dict[str, str]) -> None:
        mem = self.__dict__.setdefault(attr, {})
        if configs:
            mem[name] = dict(configs)
        else:
            mem.pop(name, None)

    # Per-group configs (config resource type GROUP, broker.group_configs). Default: kept in
    # memory by this controller object (not persisted).
    def group_configs(self) -> dict[str, dict[str, str]]:
        """``{group id: configs}``."""
        return dict(getattr(self, "_group_configs_mem", {}))

    async def set_group_configs(self, name: str, configs: dict[str, str]) -> None:
        """Store a group's configs (validated by the broker); {} deletes them."""
        self._remember("_group_configs_mem", name, configs)
