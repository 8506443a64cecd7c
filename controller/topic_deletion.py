"""TopicDeletionManager (Kafka's): deletes topics queued under ``/admin/delete_topics``.

1. A topic is queued (``enqueue_topics_for_deletion``, or on controller failover from the
   znodes). It is *ineligible* while a replica is offline or a reassignment is in progress.
2. Deletion starts for eligible topics: partitions go Offline -> NonExistent, every broker
   gets UpdateMetadata with leader -2 (the topic leaves metadata), live replicas go
   Offline -> ReplicaDeletionStarted (StopReplica with delete=true); replicas on dead brokers
   go ReplicaDeletionIneligible and the topic waits.
3. StopReplica responses move replicas to ReplicaDeletionSuccessful (or Ineligible on an
   error, retried later). When every replica succeeded, the replicas become NonExistent and
   the topic's znodes are deleted (fenced): ``/brokers/topics/<t>``, ``/config/topics/<t>``,
   ``/admin/delete_topics/<t>``.
4. A broker coming back (or a reassignment finishing) resumes waiting deletions; a new
   controller resumes all of them, so deletion finishes after failovers and restarts.

With ``delete.topic.enable=false`` queued deletions are removed instead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from controller.context import ControllerContext, PartitionReplica, PartitionState, ReplicaState
from controller.kafka_zk_client import KafkaZkClient
from controller.partition_state_machine import PartitionStateMachine
from controller.replica_state_machine import ReplicaStateMachine

log = logging.getLogger(__name__)


class TopicDeletionManager:
    def __init__(self, context: ControllerContext, zk: KafkaZkClient,
                 replicas: ReplicaStateMachine, partitions: PartitionStateMachine,
                 delete_topic_enable: bool,
                 send_metadata_update: Callable[[list], None],
                 mute_partition_modifications: Callable[[str], None]) -> None:
        self.context = context
        self.zk = zk
        self.replicas = replicas
        self.partitions = partitions
        self.enabled = delete_topic_enable
        self.send_metadata_update = send_metadata_update
        self.mute_partition_modifications = mute_partition_modifications
        self.on_topic_deleted: Callable[[str], Awaitable[None] | None] | None = None

    async def init(self, to_delete: set[str], ineligible: set[str]) -> None:
        log.info("Initializing manager with initial deletions: %s, initial ineligible "
                 "deletions: %s", sorted(to_delete), sorted(ineligible))
        if self.enabled:
            self.context.queue_topic_deletion(to_delete)
            self.context.topics_ineligible_for_deletion |= ineligible & \
                self.context.topics_to_be_deleted
        else:
            log.info("Removing %s since delete topic is disabled", sorted(to_delete))
            await self.zk.delete_topic_deletions(to_delete, self.context.epoch_zk_version)

    async def try_topic_deletion(self) -> None:
        if self.enabled:
            await self._resume_deletions()

    async def enqueue_topics_for_deletion(self, topics: set[str]) -> None:
        if self.enabled:
            self.context.queue_topic_deletion(topics)
            await self._resume_deletions()

    async def resume_deletion_for_topics(self, topics: Iterable[str] = ()) -> None:
        if not self.enabled:
            return
        resume = set(topics) & self.context.topics_to_be_deleted
        if resume:
            self.context.topics_ineligible_for_deletion -= resume
            await self._resume_deletions()

    async def fail_replica_deletion(self, replicas: Iterable[PartitionReplica]) -> None:
        if not self.enabled:
            return
        failed = [r for r in replicas if self.is_topic_queued_up_for_deletion(r[0][0])]
        if failed:
            topics = {r[0][0] for r in failed}
            log.debug("Deletion failed for replicas %s. Halting deletion for topics %s", failed,
                      topics)
            await self.replicas.handle_state_changes(failed, ReplicaState.DELETION_INELIGIBLE)
            self.mark_topic_ineligible_for_deletion(topics, "replica deletion failure")
            await self._resume_deletions()

    def mark_topic_ineligible_for_deletion(self, topics: Iterable[str], reason: str) -> None:
        if not self.enabled:
            return
        halted = self.context.topics_to_be_deleted & set(topics)
        self.context.topics_ineligible_for_deletion |= halted
        if halted:
            log.info("Halted deletion of topics %s due to %s", ",".join(sorted(halted)), reason)

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return self.enabled and self.context.is_topic_queued_up_for_deletion(topic)

    async def complete_replica_deletion(self, replicas: Iterable[PartitionReplica]) -> None:
        done = [r for r in replicas if self.is_topic_queued_up_for_deletion(r[0][0])]
        log.debug("Deletion successfully completed for replicas %s", done)
        await self.replicas.handle_state_changes(done, ReplicaState.DELETION_SUCCESSFUL)
        await self._resume_deletions()

    def _is_eligible(self, topic: str) -> bool:
        ctx = self.context
        return (ctx.is_topic_queued_up_for_deletion(topic)
                and not ctx.is_topic_deletion_in_progress(topic)
                and topic not in ctx.topics_ineligible_for_deletion)

    async def _complete_delete_topic(self, topic: str) -> None:
        ctx = self.context
        self.mute_partition_modifications(topic)
        await self.replicas.handle_state_changes(
            ctx.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL),
            ReplicaState.NON_EXISTENT)
        await self.zk.delete_topic(topic, ctx.epoch_zk_version)
        ctx.remove_topic(topic)
        if self.on_topic_deleted is not None:
            result = self.on_topic_deleted(topic)
            if result is not None:
                await result

    async def _on_topic_deletion(self, topics: set[str]) -> None:
        ctx = self.context
        unseen = topics - ctx.topics_with_deletion_started
        if unseen:
            parts = [tp for t in sorted(unseen) for tp in ctx.partitions_for_topic(t)]
            await self.partitions.handle_state_changes(parts, PartitionState.OFFLINE)
            await self.partitions.handle_state_changes(parts, PartitionState.NON_EXISTENT)
            ctx.begin_topic_deletion(unseen)
        self.send_metadata_update([tp for t in sorted(topics)
                                   for tp in ctx.partitions_for_topic(t)])
        await self._on_partition_deletion(topics)

    async def _on_partition_deletion(self, topics: set[str]) -> None:
        ctx = self.context
        dead: list[PartitionReplica] = []
        retry: list[PartitionReplica] = []
        ineligible: set[str] = set()
        for topic in sorted(topics):
            replicas = ctx.replicas_for_topic(topic)
            alive = [r for r in replicas if ctx.is_replica_online(r[1], r[0])]
            gone = [r for r in replicas if not ctx.is_replica_online(r[1], r[0])]
            succeeded = set(ctx.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL))
            dead += gone
            retry += [r for r in alive if r not in succeeded]
            if gone:
                log.debug("Dead Replicas (%s) found for topic %s", gone, topic)
                ineligible.add(topic)
        await self.replicas.handle_state_changes(dead, ReplicaState.DELETION_INELIGIBLE)
        await self.replicas.handle_state_changes(retry, ReplicaState.OFFLINE)
        await self.replicas.handle_state_changes(retry, ReplicaState.DELETION_STARTED)
        if ineligible:
            self.mark_topic_ineligible_for_deletion(ineligible, "offline replicas")

    async def _resume_deletions(self) -> None:
        ctx = self.context
        queued = set(ctx.topics_to_be_deleted)
        retry: set[str] = set()
        eligible: set[str] = set()
        if queued:
            log.info("Handling deletion for topics %s", ",".join(sorted(queued)))
        for topic in sorted(queued):
            if ctx.are_all_replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL):
                await self._complete_delete_topic(topic)
                log.info("Deletion of topic %s successfully completed", topic)
            elif not ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_STARTED):
                if ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_INELIGIBLE):
                    retry.add(topic)
            if self._is_eligible(topic):
                log.info("Deletion of topic %s (re)started", topic)
                eligible.add(topic)
        if retry:
            failed = [r for t in sorted(retry)
                      for r in ctx.replicas_in_state(t, ReplicaState.DELETION_INELIGIBLE)]
            await self.replicas.handle_state_changes(failed, ReplicaState.OFFLINE)
        if eligible:
            await self._on_topic_deletion(eligible)
