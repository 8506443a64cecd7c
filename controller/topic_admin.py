"""CreateTopics, DeleteTopics and CreatePartitions of the embedded controller.

``TopicAdmin`` is a mixin of :class:`controller.embedded.EmbeddedController`: it uses the
controller's state (``_topics``, ``_ids``, ``_store``, ``_channel``, ``_lock``, ``_epoch``,
...) and helpers (``_views``, ``_send``, ``_state_op``, ``_live_ids``), and runs every
operation under the controller's FIFO lock. Error codes are Kafka's, listed per method;
decisions go out in Kafka's order (LeaderAndIsr, then UpdateMetadata, then StopReplica).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.loop_slice import LoopSlice
from controller import admin_validation as av
from controller import decisions
from controller.api import (
    TYPE_INCREMENTAL,
    CreatableTopic,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    TopicResult,
)
from controller.kafka_uuid import random_uuid
from controller.metadata_store import Create, Delete, Op, SetData
from controller.topic_config import validate_topic_config
from controller.zk_data import (
    INITIAL_LEADER_EPOCH,
    NO_LEADER,
    ConfigEntityZNode,
    DeleteTopicsTopicZNode,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartitionsZNode,
    TopicZNode,
)
from protocol.errors import ErrorCode, KafkaError

__all__ = ["TopicAdmin"]

log = logging.getLogger(__name__)


@dataclass
class _Topic:
    name: str
    topic_id: uuid.UUID
    assignment: dict[int, ReplicaAssignment]
    states: dict[int, LeaderIsrAndControllerEpoch] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)


def _topic_config_path(topic: str) -> str:
    return ConfigEntityZNode.path("topics", topic)


class TopicAdmin:
    """Topic creation, deletion and partition growth (mixed into EmbeddedController)."""

    # ------------------------------------------------------------------ CreateTopics

    async def create_topics(self, topics, validate_only: bool = False,
                            timeout_ms: int | None = None) -> list[CreateTopicResult]:
        """One result per requested topic, in order. Error codes: INVALID_REQUEST
        (duplicate name in the request; counts given together with an assignment),
        INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
        INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG;
        KAFKA_STORAGE_ERROR when this broker could not create a partition's log (EMFILE,
        ENOSPC, ...): the topic is deleted again, so nothing reports a success that is not
        true and a retry may succeed. All topics go in one store transaction and one
        LeaderAndIsr/UpdateMetadata; the work is O(topics) and gives the event loop way
        every few ms (a Metadata storm's auto-creation lands here)."""
        reqs = [t if isinstance(t, CreatableTopic) else CreatableTopic(*t) for t in topics]
        counts = Counter(r.name for r in reqs)
        async with self._lock:
            results: list[CreateTopicResult] = []
            created: list[_Topic] = []
            pending = av.CollisionIndex()
            ops: list[Op] = []
            slicer = LoopSlice()
            for r in reqs:
                await slicer.tick()
                try:
                    if counts[r.name] > 1:
                        raise KafkaError(ErrorCode.INVALID_REQUEST,
                                         f"Create topics request contains duplicate topic {r.name}")
                    topic = self._new_topic(r, pending)
                except KafkaError as e:
                    results.append(CreateTopicResult(r.name, int(e.code), e.message))
                    continue
                rf = len(next(iter(topic.assignment.values())).replicas)
                results.append(CreateTopicResult(
                    r.name, int(ErrorCode.NONE), None, topic.topic_id, len(topic.assignment), rf,
                    dict(topic.configs)))
                if not validate_only:
                    created.append(topic)
                    pending.add(r.name)
                    ops += self._create_ops(topic)
            if created:
                await self._store.multi(ops)
                views = []
                index = self._collision_index()
                for t in created:
                    await slicer.tick()
                    self._topics[t.name] = t
                    self._ids[t.topic_id] = t.name
                    index.add(t.name)
                    if t.configs:
                        await self._channel.send_topic_config_change(self._broker.id, t.name,
                                                                     dict(t.configs))
                    views += self._views(t)
                errors = await self._send(views, TYPE_INCREMENTAL, is_new=True)
                await self._undo_unhosted(created, errors, results)
            return results

    async def _undo_unhosted(self, created: list[_Topic], errors: dict | None,
                             results: list[CreateTopicResult]) -> None:
        """Delete the topics a partition log of which this broker could not create (its
        LeaderAndIsr answer), answering KAFKA_STORAGE_ERROR for them."""
        failed: dict[str, list[int]] = {}
        for (topic, p), code in (errors or {}).items():
            if code == ErrorCode.KAFKA_STORAGE_ERROR:
                failed.setdefault(topic, []).append(p)
        if not failed:
            return
        for t in created:
            if t.name in failed:
                log.error("could not create the logs of %s partitions %s: deleting the topic",
                          t.name, sorted(failed[t.name]))
                await self._delete_topic(t)
        for i, res in enumerate(results):
            if res.name in failed and res.error_code == ErrorCode.NONE:
                results[i] = CreateTopicResult(
                    res.name, int(ErrorCode.KAFKA_STORAGE_ERROR),
                    f"Could not create the log of partitions {sorted(failed[res.name])} of "
                    f"topic {res.name} on broker {self._broker.id} (see its log).")

    def _collision_index(self) -> av.CollisionIndex:
        """The existing topics' names by collision key (built once, kept up to date)."""
        index = getattr(self, "_collisions", None)
        if index is None:
            index = self._collisions = av.CollisionIndex(self._topics)
        return index

    def _new_topic(self, r: CreatableTopic, pending: av.CollisionIndex) -> _Topic:
        av.validate_topic_name(r.name)
        if r.name in self._topics or r.name in pending:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{r.name}' already exists.")
        self._collision_index().check(r.name)
        pending.check(r.name)
        replicas = av.new_topic_assignment(
            r, self._live_ids(), self._max_partitions, self._default_partitions,
            self._default_rf, lambda n, rf: {p: list(a.replicas)
                                             for p, a in self._assign(range(n), rf).items()})
        assignment = {p: ReplicaAssignment(tuple(rs)) for p, rs in replicas.items()}
        configs = r.configs if isinstance(r.configs, dict) else dict(r.configs)
        configs = validate_topic_config(configs)
        topic = _Topic(r.name, random_uuid(), assignment, configs=configs)
        for p, a in assignment.items():
            topic.states[p] = self._initial_state(a)
        return topic

    def _assign(self, partitions: Iterable[int], rf: int) -> dict[int, ReplicaAssignment]:
        """Round-robin over live brokers in id order (one broker here: always [self])."""
        ids = sorted(self._live_ids())
        return {p: ReplicaAssignment(tuple(ids[(p + i) % len(ids)] for i in range(rf)))
                for p in partitions}

    def _initial_state(self, a: ReplicaAssignment) -> LeaderIsrAndControllerEpoch:
        live = [r for r in a.replicas if r in self._live_ids()]
        leader = live[0] if live else NO_LEADER
        return LeaderIsrAndControllerEpoch(leader, INITIAL_LEADER_EPOCH, tuple(live), self._epoch, 0)

    def _create_ops(self, t: _Topic) -> list[Op]:
        ops: list[Op] = [
            Delete(_topic_config_path(t.name), must_exist=False),  # left by an old deletion
            Create(_topic_config_path(t.name), ConfigEntityZNode.encode(t.configs), make_parents=True),
            Create(TopicZNode.path(t.name), TopicZNode.encode(TopicAssignment(t.topic_id, t.assignment)),
                   make_parents=True),
            Create(TopicPartitionsZNode.path(t.name)),
        ]
        for p, state in t.states.items():
            ops.append(self._state_op(t.name, p, None, state))
        return ops

    # ------------------------------------------------------------------ DeleteTopics

    async def delete_topics(self, names: Iterable[str] = (), topic_ids: Iterable[uuid.UUID] = (),
                            timeout_ms: int | None = None) -> list[DeleteTopicResult]:
        """Results for ``names`` then ``topic_ids``, in order. UNKNOWN_TOPIC_OR_PARTITION for
        an unknown name, UNKNOWN_TOPIC_ID for an unknown id. Returns after the broker applied
        UpdateMetadata (leader -2) and StopReplica(delete) and the znodes are gone."""
        async with self._lock:
            results: list[DeleteTopicResult] = []
            doomed: dict[str, _Topic] = {}
            for name in names:
                t = self._topics.get(name)
                if t is None:
                    results.append(DeleteTopicResult(
                        name, None, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                        "This server does not host this topic-partition."))
                else:
                    doomed[name] = t
                    results.append(DeleteTopicResult(name, t.topic_id, int(ErrorCode.NONE)))
            for tid in topic_ids:
                name = self._ids.get(tid)
                if name is None:
                    results.append(DeleteTopicResult(None, tid, int(ErrorCode.UNKNOWN_TOPIC_ID),
                                                     "This server does not host this topic ID."))
                else:
                    doomed[name] = self._topics[name]
                    results.append(DeleteTopicResult(name, tid, int(ErrorCode.NONE)))
            if doomed:
                await self._store.multi([Create(DeleteTopicsTopicZNode.path(n), make_parents=True)
                                         for n in doomed
                                         if self._store.exists(DeleteTopicsTopicZNode.path(n)) is None])
                for t in doomed.values():
                    await self._delete_topic(t)
            return results

    async def _delete_topic(self, t: _Topic) -> None:
        """Kafka's TopicDeletionManager, one broker: UpdateMetadata with leader -2, then
        StopReplica(delete=True), then remove the topic's znodes."""
        me = self._broker.id
        views = self._views(t)
        if views:
            await self._channel.send_update_metadata(me, decisions.update_metadata(
                me, self._epoch, self._broker_epoch, TYPE_INCREMENTAL, views, self._live(),
                deleting=True))
        hosted = [(t.name, p, t.states[p].leader_epoch if p in t.states else -1)
                  for p, a in t.assignment.items() if me in a.replicas]
        if hosted:
            await self._channel.send_stop_replica(me, decisions.stop_replica(
                me, self._epoch, self._broker_epoch, hosted, delete=True))
        await self._store.multi([
            Delete(TopicZNode.path(t.name), recursive=True, must_exist=False),
            Delete(_topic_config_path(t.name), must_exist=False),
            Delete(DeleteTopicsTopicZNode.path(t.name), must_exist=False),
        ])
        self._topics.pop(t.name, None)
        self._collision_index().discard(t.name)
        if t.topic_id is not None:
            self._ids.pop(t.topic_id, None)

    # ------------------------------------------------------------------ CreatePartitions

    async def create_partitions(self, topics, validate_only: bool = False,
                                timeout_ms: int | None = None) -> list[TopicResult]:
        """Increase partition counts. INVALID_REQUEST (duplicate topic), UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_PARTITIONS (count not above the current one, or above the limit),
        INVALID_REPLICA_ASSIGNMENT (wrong number of assignments, unknown brokers, duplicates,
        replication factor differing from the topic's), INVALID_REPLICATION_FACTOR (the
        topic's replication factor exceeds the live brokers)."""
        reqs = [t if isinstance(t, CreatePartitionsTopic) else CreatePartitionsTopic(*t)
                for t in topics]
        counts: dict[str, int] = {}
        for r in reqs:
            counts[r.name] = counts.get(r.name, 0) + 1
        async with self._lock:
            results = []
            for r in reqs:
                try:
                    if counts[r.name] > 1:
                        raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
                    await self._grow(r, validate_only)
                    results.append(TopicResult(r.name, int(ErrorCode.NONE)))
                except KafkaError as e:
                    results.append(TopicResult(r.name, int(e.code), e.message))
            return results

    async def _grow(self, r: CreatePartitionsTopic, validate_only: bool) -> None:
        t = self._topics.get(r.name)
        if t is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{r.name}' does not exist.")
        current = len(t.assignment)
        av.check_partition_growth(current, r.count, self._max_partitions)
        rf = len(t.assignment[0].replicas) if 0 in t.assignment else 1
        new_ids = range(current, r.count)
        if r.assignments is not None:
            added = {p: ReplicaAssignment(tuple(rs)) for p, rs in av.added_assignments(
                r.assignments, current, r.count, self._live_ids(), rf).items()}
        else:
            if rf > len(self._live_ids()):
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Replication factor: {rf} larger than available brokers: "
                                 f"{len(self._live_ids())}.")
            added = self._assign(new_ids, rf)
        if validate_only:
            return
        states = {p: self._initial_state(a) for p, a in added.items()}
        assignment = {**t.assignment, **added}
        topic_stat = self._store.exists(TopicZNode.path(t.name))
        ops: list[Op] = [SetData(TopicZNode.path(t.name),
                                 TopicZNode.encode(TopicAssignment(t.topic_id, assignment)),
                                 expected_version=topic_stat.version if topic_stat else -1)]
        ops += [self._state_op(t.name, p, None, s) for p, s in states.items()]
        await self._store.multi(ops)
        t.assignment = assignment
        t.states.update(states)
        await self._send(self._views(t, sorted(added)), TYPE_INCREMENTAL, is_new=True)
