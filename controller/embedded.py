"""EmbeddedController: the single-node controller used when ``zookeeper.connect`` is unset.

It plays Kafka's ZooKeeper-mode controller for a cluster of one broker, over the embedded
store (:mod:`controller.metadata_store`, same znode documents as ZooKeeper):

- startup: increments ``/controller_epoch`` (conditional set; 1 on a fresh store), creates
  ``/cluster/id`` once (22-char base64 UUID), registers ``/brokers/ids/<id>`` (the broker
  epoch is that znode's czxid), gives topic IDs to topics without one, finishes pending
  deletions (``/admin/delete_topics``), elects leaders where needed, then sends config
  notifications, a FULL LeaderAndIsr for every partition hosted here and a FULL
  UpdateMetadata.
- leader epochs, as Kafka: a new partition starts at leader epoch 0 (partition epoch 0);
  every leader election (offline leader replaced, preferred or unclean election, leader lost
  -> NO_LEADER) bumps the leader epoch by one and rewrites the state znode (partition epoch
  +1). A partition whose recorded leader is this live broker is *not* re-elected on restart,
  so its leader epoch survives restarts unchanged.
- admin operations (CreateTopics, DeleteTopics, CreatePartitions: :mod:`controller.topic_admin`;
  (Incremental)AlterConfigs, ElectLeaders, producer-id blocks here) with Kafka's error codes; each decision goes out through
  the :class:`~controller.api.ControllerChannel` in Kafka's order (LeaderAndIsr, then
  UpdateMetadata, then StopReplica).

All work runs under one FIFO ``asyncio.Lock`` (the single event queue of Kafka's
ControllerEventManager), so operations never interleave.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace

from controller import decisions, elections
from controller.api import (
    ELECTION_PREFERRED,
    ELECTION_UNCLEAN,
    PRODUCER_ID_BLOCK_SIZE,
    TYPE_FULL,
    TYPE_INCREMENTAL,
    BrokerMetadataListener,
    Controller,
    ControllerChannel,
    ElectLeadersResult,
    TopicResult,
)
from controller.broker_config_admin import BrokerConfigAdmin
from controller.channel import LocalControllerChannel
from controller.kafka_uuid import random_uuid, to_base64
from controller.metadata_store import Create, Delete, EmbeddedMetadataStore, Op, SetData
from controller.topic_admin import TopicAdmin, _Topic, _topic_config_path
from controller.topic_config import apply_incremental, validate_topic_config
from controller.zk_data import (
    NO_LEADER,
    PERSISTENT_ZK_PATHS,
    BrokerIdZNode,
    BrokerInfo,
    ClusterIdZNode,
    ConfigEntityZNode,
    ControllerEpochZNode,
    ControllerZNode,
    DeleteTopicsTopicZNode,
    DeleteTopicsZNode,
    LeaderIsrAndControllerEpoch,
    ProducerIdBlock,
    ProducerIdBlockZNode,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicsZNode,
    TopicZNode,
)
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

DEFAULT_MAX_PARTITIONS_PER_TOPIC = 10_000


class EmbeddedController(TopicAdmin, BrokerConfigAdmin, Controller):
    """Single-node controller. ``broker`` is this broker's registration (id, advertised
    endpoints, rack). ``default_num_partitions`` / ``default_replication_factor`` answer -1
    in CreateTopics (``num.partitions``, ``default.replication.factor``)."""

    def __init__(
        self,
        store: EmbeddedMetadataStore,
        broker: BrokerInfo,
        channel: ControllerChannel,
        *,
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
        max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._store = store
        self._broker = broker
        self._channel = channel
        self._default_partitions = default_num_partitions
        self._default_rf = default_replication_factor
        self._max_partitions = max_partitions_per_topic
        self._clock_ms = clock_ms
        self._lock = asyncio.Lock()
        self._topics: dict[str, _Topic] = {}
        self._ids: dict[uuid.UUID, str] = {}
        self._epoch = 0
        self._epoch_version = -1
        self._broker_epoch = -1
        self._cluster_id = ""
        self._started = False

    @classmethod
    async def open(cls, log_dir: str, broker: BrokerInfo, listener: BrokerMetadataListener,
                   **kwargs) -> EmbeddedController:
        """Open (or create) the store under ``log_dir`` (the first of ``log.dirs``) and
        return a controller wired to ``listener`` through a LocalControllerChannel. Call
        ``await startup()`` next. Raises MetadataStoreCorruptError for an unreadable store."""
        store = EmbeddedMetadataStore(log_dir)
        await store.open()
        return cls(store, broker, LocalControllerChannel(broker.id, listener), **kwargs)

    # ------------------------------------------------------------------ properties

    @property
    def controller_id(self) -> int:
        return self._broker.id

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def controller_epoch(self) -> int:
        return self._epoch

    @property
    def broker_epoch(self) -> int:
        return self._broker_epoch

    def _live(self) -> list[BrokerInfo]:
        return [self._broker]

    def _live_ids(self) -> set[int]:
        return {b.id for b in self._live()}

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        async with self._lock:
            await self._register()
            self._load_topics()
            await self._assign_missing_topic_ids()
            await self._finish_pending_deletions()
            await self._elect_on_startup()
            self._started = True
            await self._bootstrap_features()  # KIP-584: a new cluster's finalized levels
            await self._send_broker_configs_on_startup()  # KIP-226, before topic configs
            for t in self._topics.values():
                if t.configs:
                    await self._channel.send_topic_config_change(self._broker.id, t.name,
                                                                 dict(t.configs))
            await self._send(self._all_partitions(), TYPE_FULL, is_new=False)

    async def shutdown(self) -> None:
        async with self._lock:
            self._started = False
        await self._store.close()

    async def _register(self) -> None:
        s = self._store
        ops: list[Op] = [Create(p, make_parents=True) for p in PERSISTENT_ZK_PATHS
                         if s.exists(p) is None]
        if s.exists(ClusterIdZNode.path) is None:
            ops.append(Create(ClusterIdZNode.path, ClusterIdZNode.encode(to_base64(random_uuid())),
                              make_parents=True))
        stat = s.exists(ControllerEpochZNode.path)
        if stat is None:
            epoch = 1
            ops.append(Create(ControllerEpochZNode.path, ControllerEpochZNode.encode(epoch)))
        else:
            epoch = ControllerEpochZNode.decode(s.get_data(ControllerEpochZNode.path)) + 1
            ops.append(SetData(ControllerEpochZNode.path, ControllerEpochZNode.encode(epoch),
                               expected_version=stat.version))
        now = self._clock_ms()
        info = replace(self._broker, timestamp_ms=now)
        broker_path = BrokerIdZNode.path(info.id)
        ops += [
            Delete(broker_path, must_exist=False),
            Create(broker_path, BrokerIdZNode.encode(info)),
            Delete(ControllerZNode.path, must_exist=False),
            Create(ControllerZNode.path, ControllerZNode.encode(info.id, now)),
        ]
        await s.multi(ops)
        self._broker = info
        self._epoch = epoch
        self._epoch_version = s.exists(ControllerEpochZNode.path).version
        self._broker_epoch = s.exists(broker_path).czxid
        self._cluster_id = ClusterIdZNode.decode(s.get_data(ClusterIdZNode.path))
        log.info("embedded controller %d: controller epoch %d, cluster id %s",
                 info.id, epoch, self._cluster_id)

    def _load_topics(self) -> None:
        s = self._store
        self._topics.clear()
        self._ids.clear()
        for name in s.get_children(TopicsZNode.path):
            data = s.get_data(TopicZNode.path(name))
            assignment = TopicZNode.decode(name, data)
            topic = _Topic(name, assignment.topic_id, dict(assignment.partitions))
            for p in topic.assignment:
                path = TopicPartitionStateZNode.path(name, p)
                if s.exists(path) is not None:
                    raw, stat = s.get(path)
                    topic.states[p] = TopicPartitionStateZNode.decode(raw, stat.version)
            topic.configs = ConfigEntityZNode.decode(s.get_data(_topic_config_path(name)))
            self._topics[name] = topic
            if topic.topic_id is not None:
                self._ids[topic.topic_id] = name

    async def _assign_missing_topic_ids(self) -> None:
        ops: list[Op] = []
        for t in self._topics.values():
            if t.topic_id is None:
                t.topic_id = random_uuid()
                self._ids[t.topic_id] = t.name
                ops.append(SetData(TopicZNode.path(t.name),
                                   TopicZNode.encode(TopicAssignment(t.topic_id, t.assignment))))
        if ops:
            await self._store.multi(ops)

    async def _finish_pending_deletions(self) -> None:
        for name in self._store.get_children(DeleteTopicsZNode.path):
            topic = self._topics.get(name)
            if topic is None:
                await self._store.multi([Delete(DeleteTopicsTopicZNode.path(name))])
            else:
                await self._delete_topic(topic)

    # ------------------------------------------------------------------ elections

    def _unclean_allowed(self, topic: _Topic) -> bool:
        return topic.configs.get("unclean.leader.election.enable", "false").strip().lower() == "true"

    async def _elect_on_startup(self) -> None:
        live = self._live_ids()
        ops: list[Op] = []
        changed: list[tuple[_Topic, int, LeaderIsrAndControllerEpoch]] = []
        for t in self._topics.values():
            for p in t.assignment:
                state = t.states.get(p)
                if state is not None and state.leader in live:
                    continue  # online partition with a live leader: no election
                new = elections.offline_election(t.assignment[p].replicas, state, live,
                                                 self._unclean_allowed(t), self._epoch)
                if new is None:
                    if state is not None and state.leader == NO_LEADER:
                        continue
                    new = elections.next_state(state, NO_LEADER, state.isr if state else (),
                                               self._epoch)
                changed.append((t, p, new))
                ops.append(self._state_op(t.name, p, state, new))
        if ops:
            await self._store.multi(ops)
            for t, p, new in changed:
                t.states[p] = new

    @staticmethod
    def _state_op(topic: str, p: int, old: LeaderIsrAndControllerEpoch | None,
                  new: LeaderIsrAndControllerEpoch) -> Op:
        path = TopicPartitionStateZNode.path(topic, p)
        data = TopicPartitionStateZNode.encode(new)
        if old is None:
            return Create(path, data, make_parents=True)
        return SetData(path, data, expected_version=old.partition_epoch)

    # ------------------------------------------------------------------ decisions

    def _views(self, topic: _Topic, partitions: Iterable[int] | None = None
               ) -> list[decisions.PartitionView]:
        ps = topic.assignment if partitions is None else partitions
        return [decisions.PartitionView(topic.name, topic.topic_id, p, topic.assignment[p],
                                        topic.states[p])
                for p in ps if p in topic.states]

    def _all_partitions(self) -> list[decisions.PartitionView]:
        return [v for t in self._topics.values() for v in self._views(t)]

    async def _send(self, views: list[decisions.PartitionView], request_type: int,
                    is_new: bool) -> dict | None:
        """LeaderAndIsr for partitions hosted here, then UpdateMetadata for all of them;
        returns the broker's LeaderAndIsr answer ``{(topic, partition): error code}``."""
        me = self._broker.id
        hosted = [v for v in views if me in v.assignment.replicas]
        errors = None
        if hosted or request_type == TYPE_FULL:
            errors = await self._channel.send_leader_and_isr(me, decisions.leader_and_isr(
                me, self._epoch, self._broker_epoch, request_type, hosted, self._live(), is_new))
        await self._channel.send_update_metadata(me, decisions.update_metadata(
            me, self._epoch, self._broker_epoch, request_type, views, self._live()))
        return errors

    # ------------------------------------------------------------------ configs

    def topic_configs(self, name: str) -> dict[str, str] | None:
        t = self._topics.get(name)
        return None if t is None else dict(t.configs)

    async def alter_topic_configs(self, name: str, configs, validate_only: bool = False
                                  ) -> TopicResult:
        """Replace the topic's overrides (AlterConfigs). UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_CONFIG."""
        return await self._alter(name, lambda _current: validate_topic_config(dict(configs)),
                                 validate_only)

    async def incremental_alter_topic_configs(self, name: str, ops, validate_only: bool = False
                                              ) -> TopicResult:
        """IncrementalAlterConfigs on one topic (see topic_config.apply_incremental)."""
        return await self._alter(name, lambda current: apply_incremental(current, ops),
                                 validate_only)

    async def _alter(self, name: str, compute, validate_only: bool) -> TopicResult:
        async with self._lock:
            t = self._topics.get(name)
            try:
                if t is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"Topic {name} does not exist.")
                new = compute(dict(t.configs))
            except KafkaError as e:
                return TopicResult(name, int(e.code), e.message)
            if not validate_only and new != t.configs:
                await self._store.multi([SetData(_topic_config_path(name),
                                                 ConfigEntityZNode.encode(new))])
                t.configs = new
                await self._channel.send_topic_config_change(self._broker.id, name, dict(new))
            return TopicResult(name, int(ErrorCode.NONE))

    # ------------------------------------------------------------------ ElectLeaders

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None
                            ) -> list[ElectLeadersResult]:
        """KIP-460. Per partition: UNKNOWN_TOPIC_OR_PARTITION; ELECTION_NOT_NEEDED (preferred:
        the preferred replica already leads; unclean: a live leader exists);
        PREFERRED_LEADER_NOT_AVAILABLE (preferred replica not live or not in the ISR);
        ELIGIBLE_LEADERS_NOT_AVAILABLE (unclean: no live replica); INVALID_REQUEST (unknown
        election type). ``partitions=None`` means every partition, and then only partitions
        where an election ran or failed are reported."""
        async with self._lock:
            everything = partitions is None
            if everything:
                partitions = [(t.name, p) for t in self._topics.values() for p in t.assignment]
            results: list[ElectLeadersResult] = []
            ops: list[Op] = []
            elected: list[tuple[_Topic, int, LeaderIsrAndControllerEpoch]] = []
            live = self._live_ids()
            for topic, p in partitions:
                t = self._topics.get(topic)
                code, msg, new = ErrorCode.NONE, None, None
                if election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
                    code, msg = ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}"
                elif t is None or p not in t.assignment:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    msg = f"The partition {topic}-{p} does not exist."
                elif election_type == ELECTION_PREFERRED:
                    code, new = elections.preferred_election(
                        t.assignment[p].replicas, t.states.get(p), live, self._epoch)
                    if code == ErrorCode.ELECTION_NOT_NEEDED:
                        msg = "Leader election not needed"
                    elif code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE:
                        msg = f"Failed to elect leader for partition {topic}-{p} under strategy " \
                              "PreferredReplicaPartitionLeaderElectionStrategy"
                else:
                    state = t.states.get(p)
                    if state is not None and state.leader in live:
                        code, msg = ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed"
                    else:
                        new = elections.offline_election(t.assignment[p].replicas, state, live,
                                                         True, self._epoch)
                        if new is None:
                            code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                            msg = f"Failed to elect leader for partition {topic}-{p} under " \
                                  "strategy OfflinePartitionLeaderElectionStrategy"
                if new is not None:
                    elected.append((t, p, new))
                    ops.append(self._state_op(topic, p, t.states.get(p), new))
                if not (everything and code == ErrorCode.ELECTION_NOT_NEEDED):
                    results.append(ElectLeadersResult(topic, p, int(code), msg))
            if ops:
                await self._store.multi(ops)
                views = []
                for t, p, new in elected:
                    t.states[p] = new
                    views += self._views(t, [p])
                await self._send(views, TYPE_INCREMENTAL, is_new=False)
            return results

    # ------------------------------------------------------------------ security (issue 15)

    def security_store(self):
        """A ``controller.znode_store.ZNodeStore`` over this store (credentials, ACLs, quotas,
        delegation tokens in Kafka's znode layout)."""
        from controller.security_store import EmbeddedZNodeStore
        return EmbeddedZNodeStore(self._store)

    # ------------------------------------------------------------------ producer ids

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        """Next block after ``/latest_producer_id_block`` (first block starts at 0)."""
        async with self._lock:
            s = self._store
            stat = s.exists(ProducerIdBlockZNode.path)
            data = s.get_data(ProducerIdBlockZNode.path)
            start = 0 if not data else ProducerIdBlockZNode.decode(data).block_end + 1
            if start > (1 << 63) - 1 - PRODUCER_ID_BLOCK_SIZE:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "Exhausted all producer ids")
            block = ProducerIdBlock(broker_id, start, start + PRODUCER_ID_BLOCK_SIZE - 1)
            data = ProducerIdBlockZNode.encode(block)
            if stat is None:
                await s.multi([Create(ProducerIdBlockZNode.path, data)])
            else:
                await s.multi([SetData(ProducerIdBlockZNode.path, data, stat.version)])
            return block
