"""Topic changes of the ZooKeeper controller (a collaborator of KafkaController).

- ``/brokers/topics`` children (``TopicChange``): new topics get a topic ID if they have
  none (fenced write) and their partitions go NewPartition -> OnlinePartition (replicas
  NewReplica -> OnlineReplica, leaders elected, LeaderAndIsr and UpdateMetadata sent);
  removed topics are forgotten.
- ``/brokers/topics/<t>`` data (``PartitionModifications``): partitions added by
  CreatePartitions are created the same way; while the topic is queued for deletion the
  additions are refused and the znode rewritten with the existing partitions.
- ``/admin/delete_topics`` children (``TopicDeletion``): unknown topics' entries are
  removed; with ``delete.topic.enable=false`` every entry is removed; else the topics are
  queued on the :class:`~controller.topic_deletion.TopicDeletionManager` (ineligible while
  a partition is being reassigned).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from controller import controller_events as ev
from controller import zk_data as zd
from controller.context import PartitionState, ReplicaState, TopicPartition
from controller.controller_core import ChildChangeWatch, NodeChangeWatch
from controller.kafka_uuid import random_uuid
from controller.partition_state_machine import OfflineStrategy

if TYPE_CHECKING:
    from controller.controller_core import ControllerCore

log = logging.getLogger(__name__)


class TopicChanges:
    """Topic creation, partition additions and deletion requests over the controller's
    shared state (``core``). ``watches`` are the ``/brokers/topics`` and
    ``/admin/delete_topics`` child watches the controller registers on failover."""

    def __init__(self, core: ControllerCore) -> None:
        self.core = core
        put = core.event_manager.put
        self._partition_handlers: dict[str, NodeChangeWatch] = {}
        self.watches = (ChildChangeWatch(zd.TopicsZNode.path, lambda: put(ev.TopicChange())),
                        ChildChangeWatch(zd.DeleteTopicsZNode.path,
                                         lambda: put(ev.TopicDeletion())))

    def unregister_all(self) -> None:
        for t in list(self._partition_handlers):
            self.core.zk.zk.unregister_znode_change_handler(self._partition_handlers.pop(t).path)

    def handlers(self) -> dict:
        return {
            ev.TopicChange: self._process_topic_change,
            ev.PartitionModifications: self._process_partition_modifications,
            ev.TopicDeletion: self._process_topic_deletion,
        }

    async def process_topic_ids(self, assignments: dict[str, zd.TopicAssignment]) -> None:
        """Give topics without a topic ID one (fenced write), remember every ID."""
        for topic, a in assignments.items():
            tid = a.topic_id
            if tid is None:
                tid = random_uuid()
                await self.core.zk.set_topic_assignment(
                    topic, tid, a.partitions, self.core.context.epoch_zk_version)
            self.core.context.add_topic_id(topic, tid)

    def register_partition_modifications_handlers(self, topics) -> None:
        for t in topics:
            h = NodeChangeWatch(zd.TopicZNode.path(t), on_change=lambda t=t:
                                self.core.event_manager.put(ev.PartitionModifications(t)))
            self._partition_handlers[t] = h
            self.core.zk.zk.register_znode_change_handler(h)

    def mute_partition_modifications(self, topic: str) -> None:
        h = self._partition_handlers.pop(topic, None)
        if h is not None:
            self.core.zk.zk.unregister_znode_change_handler(h.path)

    async def _process_topic_change(self, _e) -> None:
        if not self.core.is_active:
            return
        ctx = self.core.context
        topics = await self.core.zk.get_all_topics()
        new_topics = topics - ctx.all_topics
        deleted = ctx.all_topics - topics
        ctx.all_topics = topics
        self.register_partition_modifications_handlers(new_topics)
        added = await self.core.zk.get_topic_assignments(new_topics)
        for t in deleted:
            ctx.remove_topic(t)
        await self.process_topic_ids(added)
        new_partitions = []
        for topic, a in added.items():
            for p, ra in a.partitions.items():
                ctx.update_partition_full_replica_assignment((topic, p), ra)
                new_partitions.append((topic, p))
        log.info("New topics: [%s], deleted topics: [%s]", ",".join(sorted(new_topics)),
                 ",".join(sorted(deleted)))
        if new_partitions:
            await self._on_new_partition_creation(new_partitions)

    async def _on_new_partition_creation(self, tps: list[TopicPartition]) -> None:
        log.info("New partition creation callback for %d partitions", len(tps))
        await self.core.partition_sm.handle_state_changes(tps, PartitionState.NEW)
        replicas = self.core.context.replicas_for_partitions(tps)
        await self.core.replica_sm.handle_state_changes(replicas, ReplicaState.NEW)
        await self.core.partition_sm.handle_state_changes(tps, PartitionState.ONLINE,
                                                          OfflineStrategy(False))
        await self.core.replica_sm.handle_state_changes(replicas, ReplicaState.ONLINE)

    async def _process_partition_modifications(self, e: ev.PartitionModifications) -> None:
        if not self.core.is_active:
            return
        ctx = self.core.context
        got = await self.core.zk.get_topic_assignment(e.topic)
        if got is None:
            return
        assignment, _version = got
        to_add = {p: ra for p, ra in assignment.partitions.items()
                  if not ctx.partition_replica_assignment((e.topic, p))}
        if self.core.deletion.is_topic_queued_up_for_deletion(e.topic):
            if to_add:
                log.warning("Skipping adding partitions %s for topic %s since it is currently "
                            "being deleted", sorted(to_add), e.topic)
                existing = {p: ctx.partition_full_replica_assignment((e.topic, p))
                            for p in assignment.partitions if p not in to_add}
                await self.core.zk.set_topic_assignment(e.topic, ctx.topic_ids.get(e.topic),
                                                        existing, ctx.epoch_zk_version)
            return
        if to_add:
            log.info("New partitions to be added %s", sorted(to_add))
            for p, ra in to_add.items():
                ctx.update_partition_full_replica_assignment((e.topic, p), ra)
            await self._on_new_partition_creation([(e.topic, p) for p in sorted(to_add)])

    async def _process_topic_deletion(self, _e) -> None:
        if not self.core.is_active:
            return
        ctx = self.core.context
        to_delete = set(await self.core.zk.get_topic_deletions())
        missing = to_delete - ctx.all_topics
        if missing:
            log.warning("Ignoring request to delete non-existing topics %s", sorted(missing))
            await self.core.zk.delete_topic_deletions(missing, ctx.epoch_zk_version)
        to_delete -= missing
        if not self.core.config.delete_topic_enable:
            log.info("Removing %s since delete topic is disabled", sorted(to_delete))
            await self.core.zk.delete_topic_deletions(to_delete, ctx.epoch_zk_version)
            return
        if to_delete:
            log.info("Starting topic deletion for topics %s", ",".join(sorted(to_delete)))
            reassigning = {tp[0] for tp in ctx.partitions_being_reassigned}
            self.core.deletion.mark_topic_ineligible_for_deletion(to_delete & reassigning,
                                                                  "topic reassignment in progress")
            await self.core.deletion.enqueue_topics_for_deletion(to_delete)
