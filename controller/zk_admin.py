"""Admin operations of a ZooKeeper-mode broker (Kafka's ZkAdminManager + AdminZkClient), a
mixin of :class:`controller.zk_broker.ZkBroker`.

As Kafka's ZooKeeper-mode KafkaApis:
- CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders, AlterPartitionReassignments,
  ListPartitionReassignments go to the controller: on another broker every entry answers
  NOT_CONTROLLER (clients refresh metadata and retry on the controller).
- CreateTopics writes ``/config/topics/<t>`` then ``/brokers/topics/<t>`` (replica assignment
  from :mod:`controller.replica_assignment` over the live brokers, rack-aware when all have
  a rack) and waits until this broker's metadata shows a leader for every partition;
  DeleteTopics creates ``/admin/delete_topics/<t>`` and waits until the topic left the
  metadata; CreatePartitions rewrites ``/brokers/topics/<t>`` and waits for the new
  partitions. A wait longer than the request's timeout answers REQUEST_TIMED_OUT (the
  operation still completes).
- Auto-creation (Metadata, FindCoordinator) writes the znodes from any broker, without
  waiting (AutoTopicCreationManager; racks used only when every broker has one).
- (Incremental)AlterConfigs of topics and brokers (KIP-226) from any broker: write
  ``/config/<type>/<name>`` and a ``/config/changes`` notification; every broker applies it.
- Producer-id blocks: a conditional update of ``/latest_producer_id_block``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING

from controller import admin_validation as av
from controller import replica_assignment as ra
from controller.api import (
    PRODUCER_ID_BLOCK_SIZE,
    CreatableTopic,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectLeadersResult,
    TopicResult,
)
from controller.broker_config_admin import apply_incremental_ops
from controller.kafka_uuid import random_uuid
from controller.topic_config import apply_incremental, validate_topic_config
from controller.zk_client import NodeExistsError
from controller.zk_data import ProducerIdBlock, ReplicaAssignment
from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from controller.zk_broker import ZkBroker

log = logging.getLogger(__name__)

MAX_PARTITIONS = 10_000
DEFAULT_TIMEOUT_MS = 30000
NOT_CONTROLLER_MSG = "This is not the correct controller for this cluster."


class ZkAdminMixin:
    # ------------------------------------------------------------------ helpers

    async def _wait_for(self: ZkBroker, predicate, timeout_ms: int | None) -> bool:
        """Wait until ``predicate()`` holds (re-checked after every metadata update)."""
        timeout = (timeout_ms if timeout_ms is not None else DEFAULT_TIMEOUT_MS) / 1000.0
        deadline = time.monotonic() + max(0.0, timeout)
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            event = self._metadata_event
            try:
                await asyncio.wait_for(event.wait(), left)
            except TimeoutError:
                return predicate()
        return True

    def _topic_has_leaders(self: ZkBroker, name: str, partitions) -> bool:
        cache = self.metadata_cache
        for p in partitions:
            st = cache.partition_state(name, p) if cache.contains_partition(name, p) else None
            if st is None or st.leader < 0:
                return False
        return True

    def _alive_broker_metadatas(self: ZkBroker) -> list[tuple[int, str | None]]:
        return sorted((b.id, b.rack) for b in self.metadata_cache.alive_brokers())

    # ------------------------------------------------------------------ CreateTopics

    async def create_topics(self: ZkBroker, topics, validate_only: bool = False,
                            timeout_ms: int | None = None) -> list[CreateTopicResult]:
        reqs = [t if isinstance(t, CreatableTopic) else CreatableTopic(*t) for t in topics]
        if not self.is_active:
            return [CreateTopicResult(r.name, int(ErrorCode.NOT_CONTROLLER), NOT_CONTROLLER_MSG)
                    for r in reqs]
        counts: dict[str, int] = {}
        for r in reqs:
            counts[r.name] = counts.get(r.name, 0) + 1
        existing = av.CollisionIndex(await self.kzk.get_all_topics())
        results: list[CreateTopicResult] = []
        created: dict[str, list[int]] = {}
        for r in reqs:
            try:
                if counts[r.name] > 1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST,
                                     f"Create topics request contains duplicate topic {r.name}")
                assignment, configs = self._validate_new_topic(r, existing,
                                                               self._alive_broker_metadatas())
                tid = None
                if not validate_only:
                    tid = await self._write_new_topic(r.name, assignment, configs)
                    existing.add(r.name)
                    created[r.name] = sorted(assignment)
            except KafkaError as e:
                results.append(CreateTopicResult(r.name, int(e.code), e.message))
                continue
            rf = len(next(iter(assignment.values())))
            results.append(CreateTopicResult(r.name, int(ErrorCode.NONE), None, tid,
                                             len(assignment), rf, dict(configs)))
        if created:
            ok = await self._wait_for(lambda: all(self._topic_has_leaders(t, ps)
                                                  for t, ps in created.items()), timeout_ms)
            if not ok:
                for res in results:
                    if res.name in created and res.error_code == 0:
                        res.error_code = int(ErrorCode.REQUEST_TIMED_OUT)
                        res.error_message = "Timed out waiting for the topic's partitions to " \
                                            "get leaders"
        return results

    def _validate_new_topic(self: ZkBroker, r: CreatableTopic, existing: av.CollisionIndex,
                            brokers: list[tuple[int, str | None]],
                            rack_mode: str = ra.RACK_AWARE_ENFORCED):
        av.validate_topic_name(r.name)
        if r.name in existing or self.metadata_cache.contains_topic(r.name):
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{r.name}' already exists.")
        existing.check(r.name)
        raw = r.configs if isinstance(r.configs, dict) else dict(r.configs)
        nulls = sorted(k for k, v in raw.items() if v is None)
        if nulls:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Null value not supported for topic configs: {','.join(nulls)}")
        live = [b for b, _ in brokers]
        if r.replica_assignment:
            if r.num_partitions != -1 or r.replication_factor != -1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Both numPartitions or "
                                 "replicationFactor and replicasAssignments were set. Both "
                                 "cannot be used at the same time.")
            if len(r.replica_assignment) > MAX_PARTITIONS:
                av.check_counts(len(r.replica_assignment), 1, 1, MAX_PARTITIONS)
            av.check_assignment(r.replica_assignment, 0, live)
            assignment = {p: list(rs) for p, rs in sorted(r.replica_assignment.items())}
        else:
            n = self.config.num_partitions if r.num_partitions == -1 else r.num_partitions
            rf = self.config.default_replication_factor if r.replication_factor == -1 \
                else r.replication_factor
            av.check_counts(n, rf, len(live), MAX_PARTITIONS)
            metas = ra.broker_metadatas(brokers, rack_mode)
            assignment = ra.assign_replicas_to_brokers(metas, n, rf, rng=self._rng)
        return assignment, validate_topic_config(raw)

    async def _write_new_topic(self: ZkBroker, name: str, assignment: dict[int, list[int]],
                               configs: dict[str, str]) -> uuid.UUID:
        """AdminZkClient.createTopicWithAssignment: the config znode, then the topic znode
        (NodeExists -> TOPIC_ALREADY_EXISTS)."""
        tid = random_uuid()
        await self.kzk.set_or_create_entity_configs("topics", name, configs)
        try:
            await self.kzk.create_topic_assignment(
                name, tid, {p: ReplicaAssignment(tuple(rs)) for p, rs in assignment.items()})
        except NodeExistsError:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS,
                             f"Topic '{name}' already exists.") from None
        self._topic_configs[name] = dict(configs)
        log.info("Creating topic %s with configuration %s and initial partition assignment %s",
                 name, configs, assignment)
        return tid

    async def auto_create_topics(self: ZkBroker, topics) -> list[CreateTopicResult]:
        """Kafka's AutoTopicCreationManager in ZooKeeper mode (any broker writes the topic
        znodes; the controller creates the partitions): validated together, then written
        concurrently (pipelined on the ZooKeeper session), not one topic per round trip."""
        reqs = [t if isinstance(t, CreatableTopic) else CreatableTopic(*t) for t in topics]
        existing = av.CollisionIndex(await self.kzk.get_all_topics())
        brokers = [(b, info.rack) for b, (info, _e) in
                   (await self.kzk.get_all_brokers_and_epochs()).items()]
        out: dict[int, CreateTopicResult] = {}
        todo: list[tuple[int, CreatableTopic, dict, dict]] = []
        for i, r in enumerate(reqs):
            try:
                assignment, configs = self._validate_new_topic(r, existing, brokers,
                                                               ra.RACK_AWARE_SAFE)
            except KafkaError as e:
                out[i] = CreateTopicResult(r.name, int(e.code), e.message)
                continue
            existing.add(r.name)
            todo.append((i, r, assignment, configs))

        async def write(i: int, r: CreatableTopic, assignment: dict, configs: dict) -> None:
            try:
                tid = await self._write_new_topic(r.name, assignment, configs)
            except KafkaError as e:
                out[i] = CreateTopicResult(r.name, int(e.code), e.message)
                return
            out[i] = CreateTopicResult(r.name, int(ErrorCode.NONE), None, tid,
                                       len(assignment), len(assignment[0]), configs)
        await asyncio.gather(*(write(*t) for t in todo))
        return [out[i] for i in range(len(reqs))]

    # ------------------------------------------------------------------ DeleteTopics

    async def delete_topics(self: ZkBroker, names=(), topic_ids=(), timeout_ms: int | None = None
                            ) -> list[DeleteTopicResult]:
        names, topic_ids = list(names), list(topic_ids)
        cache = self.metadata_cache
        if not self.is_active:
            return ([DeleteTopicResult(n, None, int(ErrorCode.NOT_CONTROLLER), NOT_CONTROLLER_MSG)
                     for n in names] +
                    [DeleteTopicResult(None, t, int(ErrorCode.NOT_CONTROLLER), NOT_CONTROLLER_MSG)
                     for t in topic_ids])
        existing = await self.kzk.get_all_topics()
        results: list[DeleteTopicResult] = []
        doomed: list[str] = []
        for name in names:
            if name not in existing:
                results.append(DeleteTopicResult(name, None,
                                                 int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                                 "This server does not host this topic-partition."))
                continue
            results.append(DeleteTopicResult(name, cache.topic_id(name), int(ErrorCode.NONE)))
            doomed.append(name)
        for tid in topic_ids:
            name = cache.topic_name(tid)
            if name is None or name not in existing:
                results.append(DeleteTopicResult(None, tid, int(ErrorCode.UNKNOWN_TOPIC_ID),
                                                 "This server does not host this topic ID."))
                continue
            results.append(DeleteTopicResult(name, tid, int(ErrorCode.NONE)))
            doomed.append(name)
        for name in dict.fromkeys(doomed):
            await self.kzk.create_delete_topic_path(name)
        if doomed:
            ok = await self._wait_for(lambda: not any(cache.contains_topic(t) for t in doomed),
                                      timeout_ms)
            if not ok:
                for res in results:
                    if res.name in doomed and res.error_code == 0:
                        res.error_code = int(ErrorCode.REQUEST_TIMED_OUT)
        return results

    # ------------------------------------------------------------------ CreatePartitions

    async def create_partitions(self: ZkBroker, topics, validate_only: bool = False,
                                timeout_ms: int | None = None) -> list[TopicResult]:
        reqs = [t if isinstance(t, CreatePartitionsTopic) else CreatePartitionsTopic(*t)
                for t in topics]
        if not self.is_active:
            return [TopicResult(r.name, int(ErrorCode.NOT_CONTROLLER), NOT_CONTROLLER_MSG)
                    for r in reqs]
        counts: dict[str, int] = {}
        for r in reqs:
            counts[r.name] = counts.get(r.name, 0) + 1
        results = []
        waits: dict[str, range] = {}
        for r in reqs:
            try:
                if counts[r.name] > 1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
                if self.controller.is_topic_queued_for_deletion(r.name):
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     "The topic is queued for deletion.")
                added = await self._grow(r, validate_only)
                if added:
                    waits[r.name] = added
                results.append(TopicResult(r.name, int(ErrorCode.NONE)))
            except KafkaError as e:
                results.append(TopicResult(r.name, int(e.code), e.message))
        if waits:
            ok = await self._wait_for(lambda: all(self._topic_has_leaders(t, ps)
                                                  for t, ps in waits.items()), timeout_ms)
            if not ok:
                for res in results:
                    if res.name in waits and res.error_code == 0:
                        res.error_code = int(ErrorCode.REQUEST_TIMED_OUT)
        return results

    async def _grow(self: ZkBroker, r: CreatePartitionsTopic, validate_only: bool) -> range | None:
        got = await self.kzk.get_topic_assignment(r.name)
        if got is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{r.name}' does not exist.")
        assignment, version = got
        current = len(assignment.partitions)
        if r.count < current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic currently has {current} "
                             f"partitions, which is higher than the requested {r.count}.")
        if r.count == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic already has {current} partitions.")
        if r.count > MAX_PARTITIONS:
            av.check_counts(r.count, 1, 1, MAX_PARTITIONS)
        first = assignment.partitions.get(0)
        rf = len(first.replicas) if first is not None else 1
        new_ids = range(current, r.count)
        brokers = self._alive_broker_metadatas()
        live = [b for b, _ in brokers]
        if r.assignments is not None:
            if len(r.assignments) != len(new_ids):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Increasing the number of partitions by {len(new_ids)} but "
                                 f"{len(r.assignments)} assignments provided.")
            given = dict(zip(new_ids, r.assignments, strict=True))
            av.check_assignment(given, current, live, expected_rf=rf)
            added = {p: list(rs) for p, rs in given.items()}
        else:
            metas = ra.broker_metadatas(brokers)
            head = first.replicas[0] if first is not None and first.replicas else 0
            start = next((i for i, (b, _) in enumerate(metas) if b >= head), 0)
            added = ra.assign_replicas_to_brokers(metas, len(new_ids), rf, start, current,
                                                  rng=self._rng)
        if validate_only:
            return None
        partitions = dict(assignment.partitions)
        partitions.update({p: ReplicaAssignment(tuple(rs)) for p, rs in added.items()})
        await self.kzk.set_topic_assignment(r.name, assignment.topic_id, partitions,
                                            expected_version=version)
        return new_ids

    # ------------------------------------------------------------------ configs

    def topic_configs(self: ZkBroker, name: str) -> dict[str, str] | None:
        if name in self._topic_configs:
            return dict(self._topic_configs[name])
        if self.metadata_cache.contains_topic(name):
            return {}
        return None

    async def alter_topic_configs(self: ZkBroker, name: str, configs, validate_only: bool = False
                                  ) -> TopicResult:
        return await self._alter_topic(name, lambda _cur: validate_topic_config(dict(configs)),
                                       validate_only)

    async def incremental_alter_topic_configs(self: ZkBroker, name: str, ops,
                                              validate_only: bool = False) -> TopicResult:
        return await self._alter_topic(name, lambda cur: apply_incremental(cur, ops),
                                       validate_only)

    async def _alter_topic(self: ZkBroker, name: str, compute, validate_only: bool) -> TopicResult:
        try:
            if name not in await self.kzk.get_all_topics():
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"Topic {name} does not exist.")
            current = await self.kzk.get_entity_configs("topics", name)
            new = compute(dict(current))
        except KafkaError as e:
            return TopicResult(name, int(e.code), e.message)
        if not validate_only:
            await self.kzk.set_or_create_entity_configs("topics", name, new)
            await self.kzk.create_config_change_notification(f"topics/{name}")
            await self._on_topic_config(name, new)
        return TopicResult(name, int(ErrorCode.NONE))

    def broker_configs(self: ZkBroker, entity: str) -> dict[str, str]:
        return dict(self._broker_configs.get(entity, {}))

    async def alter_broker_configs(self: ZkBroker, entity: str, configs,
                                   validate_only: bool = False) -> TopicResult:
        return await self._alter_broker(
            entity, lambda _cur: {k: v for k, v in configs.items() if v is not None},
            validate_only)

    async def incremental_alter_broker_configs(self: ZkBroker, entity: str, ops,
                                               validate_only: bool = False) -> TopicResult:
        return await self._alter_broker(entity, lambda cur: apply_incremental_ops(cur, ops),
                                        validate_only)

    async def _alter_broker(self: ZkBroker, entity: str, compute, validate_only: bool
                            ) -> TopicResult:
        try:
            current = await self.kzk.get_entity_configs("brokers", entity)
            new = compute(dict(current))
        except KafkaError as e:
            return TopicResult(entity, int(e.code), e.message)
        if not validate_only:
            await self.kzk.set_or_create_entity_configs("brokers", entity, new)
            await self.kzk.create_config_change_notification(f"brokers/{entity}")
            await self._on_broker_config(entity, new)
        return TopicResult(entity, int(ErrorCode.NONE))

    # ------------------------------------------------------------------ group configs

    def group_configs(self: ZkBroker) -> dict[str, dict[str, str]]:
        return {g: dict(c) for g, c in self._group_configs.items()}

    async def set_group_configs(self: ZkBroker, group: str, configs: dict[str, str]) -> None:
        """``/config/groups/<group>`` then a change notification, as Kafka's ZooKeeper
        entity configs; every broker's ConfigChangeManager delivers it."""
        await self.kzk.set_or_create_entity_configs("groups", group, dict(configs))
        await self.kzk.create_config_change_notification(f"groups/{group}")
        await self._on_group_config(group, dict(configs))

    # ------------------------------------------------------------------ leaders, ids

    async def elect_leaders(self: ZkBroker, election_type: int, partitions
                            ) -> list[ElectLeadersResult]:
        everything = partitions is None
        if everything:
            cache = self.metadata_cache
            partitions = [(t, p) for t in cache.all_topics()
                          for p in range(cache.num_partitions(t) or 0)]
        if not self.is_active:
            return [ElectLeadersResult(t, p, int(ErrorCode.NOT_CONTROLLER), NOT_CONTROLLER_MSG)
                    for t, p in partitions]
        if election_type not in (0, 1):
            return [ElectLeadersResult(t, p, int(ErrorCode.INVALID_REQUEST),
                                       f"Unknown election type {election_type}")
                    for t, p in partitions]
        results = await self.controller.elect_leaders(set(partitions), election_type)
        out = []
        for (t, p), (code, msg) in sorted(results.items()):
            if everything and code == ErrorCode.ELECTION_NOT_NEEDED:
                continue
            if code == ErrorCode.ELECTION_NOT_NEEDED and msg is None:
                msg = "Leader election not needed"
            out.append(ElectLeadersResult(t, p, int(code), msg))
        return out

    async def allocate_producer_ids(self: ZkBroker, broker_id: int) -> ProducerIdBlock:
        return await self.kzk.new_producer_id_block(broker_id, PRODUCER_ID_BLOCK_SIZE)

    async def controlled_shutdown(self: ZkBroker, broker_id: int, broker_epoch: int):
        return await self.controller.controlled_shutdown(broker_id, broker_epoch)

    async def alter_partition(self: ZkBroker, request, version: int):
        return await self.controller.alter_partition(request, version)

    async def alter_partition_reassignments(self: ZkBroker, reassignments):
        if not self.is_active:
            return int(ErrorCode.NOT_CONTROLLER), {}
        code, results = await self.controller.alter_partition_reassignments(reassignments)
        return int(code), {tp: (int(c), m) for tp, (c, m) in results.items()}

    async def list_partition_reassignments(self: ZkBroker, partitions):
        if not self.is_active:
            return int(ErrorCode.NOT_CONTROLLER), {}
        code, results = await self.controller.list_partition_reassignments(
            None if partitions is None else set(partitions))
        return int(code), results
