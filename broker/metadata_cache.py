"""MetadataCache: what the controller's UpdateMetadata decisions told this broker.

Pure in-memory, no I/O: the broker's BrokerMetadataListener calls
:meth:`MetadataCache.update_metadata_sliced` (which gives way to the loop while it reads a big
request, then applies it in one step; :meth:`MetadataCache.update_metadata` is the same
without awaits) with an ``UpdateMetadataRequest`` (v8 shape; older
shapes with ``ungrouped_partition_states`` / ``v0_host`` are read too), and the Metadata,
DescribeCluster, FindCoordinator, Produce/Fetch handlers query it. Follows Kafka's
ZkMetadataCache:

- live brokers are replaced by each request's ``live_brokers`` list;
- partition states are merged (INCREMENTAL) or replace the whole set (``type`` FULL = 2);
- a partition whose leader is -2 (``LeaderDuringDelete``) is removed, and a topic with no
  partitions left is removed with its topic id;
- a request whose ``controller_epoch`` is older than the newest applied one raises
  ``KafkaError(STALE_CONTROLLER_EPOCH)`` and changes nothing.

Metadata answers (:meth:`get_topic_metadata`) use Kafka's per-partition errors: the leader
is not a live broker -> LEADER_NOT_AVAILABLE with leader id -1; the leader lacks the
requested listener -> LEADER_NOT_AVAILABLE (LISTENER_NOT_FOUND when
``error_unavailable_listeners``); with ``error_unavailable_endpoints`` (Metadata v0) replicas
without an endpoint are filtered out and REPLICA_NOT_AVAILABLE reported.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from common.loop_slice import LoopSlice
from controller.zk_data import SECURITY_PROTOCOL_IDS
from protocol.errors import ErrorCode, KafkaError

LEADER_DURING_DELETE = -2
NO_LEADER_ID = -1
TYPE_FULL = 2
SLICE_STATES = 512  # partition states read between two looks at the clock (sliced update)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_PROTOCOL_NAMES = {i: name for name, i in SECURITY_PROTOCOL_IDS.items()}
_NONE, _LEADER_NOT_AVAILABLE = int(ErrorCode.NONE), int(ErrorCode.LEADER_NOT_AVAILABLE)
_LISTENER_NOT_FOUND = int(ErrorCode.LISTENER_NOT_FOUND)
_REPLICA_NOT_AVAILABLE = int(ErrorCode.REPLICA_NOT_AVAILABLE)


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    listener: str
    security_protocol: int


@dataclass(frozen=True)
class Node:
    """A broker as Metadata/FindCoordinator/DescribeCluster report it, for one listener."""

    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class Broker:
    id: int
    endpoints: dict[str, Endpoint]
    rack: str | None

    def node(self, listener: str) -> Node | None:
        e = self.endpoints.get(listener)
        return None if e is None else Node(self.id, e.host, e.port, self.rack)


class PartitionState(NamedTuple):
    """One partition as the last UpdateMetadata told it (a tuple: 100,000 of them are
    built per UpdateMetadata at scale, in a fraction of a frozen dataclass's time)."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]


_TUPLES: dict[tuple[int, ...], tuple[int, ...]] = {}


def _shared(ids) -> tuple[int, ...]:
    """One tuple object per distinct replica list (a cluster has a few hundred of them for
    100,000 partitions)."""
    t = tuple(ids)
    got = _TUPLES.get(t)
    if got is None:
        if len(_TUPLES) > 100_000:
            _TUPLES.clear()
        got = _TUPLES[t] = t
    return got


@dataclass
class PartitionMetadata:
    partition: int
    error_code: int
    leader_id: int
    leader_epoch: int
    replica_nodes: list[int]
    isr_nodes: list[int]
    offline_replicas: list[int]


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID | None
    error_code: int
    is_internal: bool
    partitions: list[PartitionMetadata] = field(default_factory=list)


class MetadataCache:
    """The broker's view of the cluster. ``cluster_id`` comes from the controller at
    startup (UpdateMetadata does not carry it)."""

    def __init__(self, broker_id: int, cluster_id: str | None = None) -> None:
        self.broker_id = broker_id
        self._cluster_id = cluster_id
        self._controller_id: int | None = None
        self._controller_epoch = -1
        self._brokers: dict[int, Broker] = {}
        self._partitions: dict[str, dict[int, PartitionState]] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        #: topic -> the Metadata handler's encoded entries of it (see `topic_memo`)
        self._memo: dict[str, dict] = {}

    # ------------------------------------------------------------------ updates

    def set_cluster_id(self, cluster_id: str) -> None:
        self._cluster_id = cluster_id

    def update_metadata(self, request: Any) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata decision; returns the partitions it deleted."""
        self._check_epoch(request)
        groups = [self._group(topic, tid, states)
                  for topic, tid, states in self._topic_states(request)]
        return self._apply(request, groups)

    async def update_metadata_sliced(self, request: Any,
                                     slicer: LoopSlice | None = None) -> list[tuple[str, int]]:
        """`update_metadata` giving way to the loop every few ms while it reads the request
        (100,000 partition states take a few hundred ms), then applied in one step: Metadata
        answers see the old state or the new one, never half of it. Called under the
        controller requests' lock (ZooKeeper mode), so no other update runs meanwhile."""
        self._check_epoch(request)
        slicer = slicer or LoopSlice()
        groups = []
        for topic, tid, states in self._topic_states(request):
            await slicer.tick()
            for i in range(0, len(states), SLICE_STATES):
                if i:
                    await slicer.tick()
                groups.append(self._group(topic, tid, states[i:i + SLICE_STATES]))
        self._check_epoch(request)
        return self._apply(request, groups)

    def _check_epoch(self, request: Any) -> None:
        if request.controller_epoch < self._controller_epoch:
            raise KafkaError(
                ErrorCode.STALE_CONTROLLER_EPOCH,
                f"UpdateMetadata with controller epoch {request.controller_epoch} is older "
                f"than {self._controller_epoch}",
            )

    @staticmethod
    def _topic_states(request: Any) -> list[tuple[str, uuid.UUID | None, list]]:
        """(topic, topic id or None, [partition state]) per topic as listed; the ungrouped
        states of older versions grouped by topic."""
        out = []
        for ts in getattr(request, "topic_states", None) or []:
            tid = ts.topic_id if getattr(ts, "topic_id", None) else None
            out.append((ts.topic_name, tid, ts.partition_states))
        ungrouped = getattr(request, "ungrouped_partition_states", None)
        if ungrouped:
            by_topic: dict[str, list] = {}
            for ps in ungrouped:
                by_topic.setdefault(ps.topic_name, []).append(ps)
            out.extend((t, None, states) for t, states in by_topic.items())
        return out

    @staticmethod
    def _group(topic: str, tid: uuid.UUID | None, states: list
               ) -> tuple[str, uuid.UUID | None, dict[int, PartitionState], list[int]]:
        """(topic, topic id, {partition: new state}, [partitions being deleted])."""
        shared = _shared
        new: dict[int, PartitionState] = {}
        deleting: list[int] = []
        for ps in states:
            if ps.leader == LEADER_DURING_DELETE:
                deleting.append(ps.partition_index)
                new.pop(ps.partition_index, None)
                continue
            new[ps.partition_index] = PartitionState(
                topic, ps.partition_index, ps.controller_epoch, ps.leader, ps.leader_epoch,
                shared(ps.isr), ps.zk_version, shared(ps.replicas),
                shared(getattr(ps, "offline_replicas", None) or ()))
        return topic, tid, new, deleting

    def _apply(self, request: Any, groups: list) -> list[tuple[str, int]]:
        deleted: list[tuple[str, int]] = []
        if getattr(request, "type", 0) == TYPE_FULL:
            keep = {(topic, p) for topic, _, new, _ in groups for p in new}
            for topic, parts in list(self._partitions.items()):
                for p in list(parts):
                    if (topic, p) not in keep:
                        deleted.append((topic, p))
                        self._remove(topic, p)
        partitions = self._partitions
        memo = self._memo
        for topic, tid, new, deleting in groups:
            memo.pop(topic, None)
            for p in deleting:
                if self._remove(topic, p):
                    deleted.append((topic, p))
            if not new:
                continue
            parts = partitions.get(topic)
            if parts is None:
                partitions[topic] = new
            else:
                parts.update(new)
            if tid is not None and tid.int != 0 and self._topic_ids.get(topic) is not tid:
                old = self._topic_ids.get(topic)
                if old is not None and old != tid:
                    self._topic_names.pop(old, None)
                self._topic_ids[topic] = tid
                self._topic_names[tid] = topic
        brokers = {b.id: self._broker(b) for b in request.live_brokers}
        if brokers != self._brokers:
            memo.clear()
        self._brokers = brokers
        self._controller_id = request.controller_id
        self._controller_epoch = request.controller_epoch
        return deleted

    @staticmethod
    def _broker(b: Any) -> Broker:
        endpoints: dict[str, Endpoint] = {}
        for e in getattr(b, "endpoints", None) or []:
            listener = e.listener or _PROTOCOL_NAMES.get(e.security_protocol, "PLAINTEXT")
            endpoints[listener] = Endpoint(e.host, e.port, listener, e.security_protocol)
        if not endpoints and getattr(b, "v0_host", ""):
            endpoints["PLAINTEXT"] = Endpoint(b.v0_host, b.v0_port, "PLAINTEXT", 0)
        return Broker(b.id, endpoints, getattr(b, "rack", None))

    def _remove(self, topic: str, partition: int) -> bool:
        parts = self._partitions.get(topic)
        if parts is None or parts.pop(partition, None) is None:
            return False
        self._memo.pop(topic, None)
        if not parts:
            del self._partitions[topic]
            tid = self._topic_ids.pop(topic, None)
            if tid is not None:
                self._topic_names.pop(tid, None)
        return True

    # ------------------------------------------------------------------ cluster queries

    @property
    def cluster_id(self) -> str | None:
        return self._cluster_id

    @property
    def controller_id(self) -> int | None:
        """The controller's broker id, or None before the first UpdateMetadata."""
        return self._controller_id

    @property
    def controller_epoch(self) -> int:
        return self._controller_epoch

    def alive_brokers(self) -> list[Broker]:
        return [self._brokers[i] for i in sorted(self._brokers)]

    def alive_broker_ids(self):
        """The live brokers' ids (a read-only view)."""
        return self._brokers.keys()

    def is_alive(self, broker_id: int) -> bool:
        return broker_id in self._brokers

    def alive_broker_node(self, broker_id: int, listener: str) -> Node | None:
        b = self._brokers.get(broker_id)
        return None if b is None else b.node(listener)

    def alive_broker_nodes(self, listener: str) -> list[Node]:
        """Live brokers that have ``listener``, by id."""
        return [n for b in self.alive_brokers() if (n := b.node(listener)) is not None]

    # ------------------------------------------------------------------ topic queries

    def contains_topic(self, name: str) -> bool:
        return name in self._partitions

    def contains_partition(self, topic: str, partition: int) -> bool:
        return partition in self._partitions.get(topic, {})

    def topic_memo(self, name: str) -> dict | None:
        """A dict the Metadata handler keeps encoded entries of topic ``name`` in
        (:mod:`broker.handlers.metadata_encoding`); emptied whenever an UpdateMetadata
        changes the topic (or the live brokers). None for an unknown topic."""
        if name not in self._partitions:
            return None
        memo = self._memo.get(name)
        if memo is None:
            memo = self._memo[name] = {}
        return memo

    def all_topics(self) -> list[str]:
        return sorted(self._partitions)

    def topic_id(self, name: str) -> uuid.UUID | None:
        return self._topic_ids.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._topic_names.get(topic_id)

    def topic_ids(self) -> dict[str, uuid.UUID]:
        return dict(self._topic_ids)

    def num_partitions(self, name: str) -> int | None:
        parts = self._partitions.get(name)
        return None if parts is None else len(parts)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._partitions.get(topic, {}).get(partition)

    def partition_leader_node(self, topic: str, partition: int, listener: str) -> Node | None:
        """The leader's node for ``listener``; None if unknown partition or no live leader."""
        s = self.partition_state(topic, partition)
        return None if s is None else self.alive_broker_node(s.leader, listener)

    def reachable_broker_ids(self, listener: str) -> set[int]:
        """The live brokers with an endpoint on ``listener``."""
        return {i for i, b in self._brokers.items() if listener in b.endpoints}

    def partition_leaders(self, name: str) -> dict[int, int] | None:
        """Topic ``name``'s partition -> leader broker id (-1: none), as the last
        UpdateMetadata told it; None if unknown. The controller's failover reads the
        states of partitions without a live leader here first (`KafkaController`)."""
        parts = self._partitions.get(name)
        return None if parts is None else {p: s.leader for p, s in parts.items()}

    def topic_partition_states(self, name: str) -> list[PartitionState] | None:
        """Topic ``name``'s partition states by partition index; None if unknown."""
        parts = self._partitions.get(name)
        return None if parts is None else [parts[p] for p in sorted(parts)]

    def get_topic_metadata(
        self,
        topics: Iterable[str] | None,
        listener: str,
        error_unavailable_endpoints: bool = False,
        error_unavailable_listeners: bool = False,
    ) -> list[TopicMetadata]:
        """Metadata for the known topics among ``topics`` (all topics when None), in
        request order (sorted for None). Unknown names are left out: the Metadata handler
        decides between auto-creation and UNKNOWN_TOPIC_OR_PARTITION."""
        names = self.all_topics() if topics is None else list(dict.fromkeys(topics))
        # the live brokers with an endpoint on the listener, once per request (not a Node
        # per partition: a Metadata request for every topic covers 100,000 partitions)
        reachable = self.reachable_broker_ids(listener)
        out = []
        for name in names:
            parts = self._partitions.get(name)
            if parts is None:
                continue
            tm = TopicMetadata(name, self._topic_ids.get(name), int(ErrorCode.NONE),
                               name in INTERNAL_TOPICS)
            tm.partitions = [self._partition_metadata(
                parts[p], reachable, error_unavailable_endpoints, error_unavailable_listeners)
                for p in sorted(parts)]
            out.append(tm)
        return out

    def _partition_metadata(self, s: PartitionState, reachable: set[int], error_endpoints: bool,
                            error_listeners: bool) -> PartitionMetadata:
        if error_endpoints:
            replicas = [r for r in s.replicas if r in reachable]
            isr = [r for r in s.isr if r in reachable]
        else:
            replicas, isr = list(s.replicas), list(s.isr)
        offline = list(s.offline_replicas)
        if s.leader not in reachable:
            code = _LEADER_NOT_AVAILABLE
            if error_listeners and self.is_alive(s.leader):
                code = _LISTENER_NOT_FOUND
            return PartitionMetadata(s.partition, code, NO_LEADER_ID, s.leader_epoch,
                                     replicas, isr, offline)
        code = _NONE
        if error_endpoints and (len(replicas) < len(s.replicas) or len(isr) < len(s.isr)):
            code = _REPLICA_NOT_AVAILABLE
        return PartitionMetadata(s.partition, code, s.leader, s.leader_epoch, replicas, isr,
                                 offline)
