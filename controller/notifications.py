"""Brokers' notifications to the ZooKeeper controller (a collaborator of KafkaController).

- ISR changes: ``/isr_change_notification/isr_change_<seq>`` names partitions whose ISR a
  leader changed; the controller re-reads their state, sends UpdateMetadata to every broker
  and completes reassignments waiting for that ISR; the notifications are deleted (fenced).
- Log dir failures (KIP-112): ``/log_dir_event_notification/log_dir_event_<seq>`` names a
  broker one of whose log dirs failed (Kafka's onBrokerLogDirFailure): every replica on that
  broker goes through OnlineReplica again, i.e. gets a LeaderAndIsr, and the broker answers
  KAFKA_STORAGE_ERROR for those in a failed dir.
- LeaderAndIsr responses (Kafka's processLeaderAndIsrResponseReceived): partitions answered
  KAFKA_STORAGE_ERROR are this broker's replicas on offline dirs
  (``ControllerContext.replicas_on_offline_dirs``, which makes ``is_replica_online`` false);
  those newly offline go through the controller's ``on_replicas_offline``: partitions the broker led
  get a leader elected from the rest of the ISR, and the replica leaves the ISR. A partition
  answered NONE is online again. Both sets are forgotten when the broker restarts or dies.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from controller import controller_events as ev
from controller import zk_data as zd
from controller.context import ReplicaState, TopicPartition
from controller.controller_core import ChildChangeWatch
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from controller.controller_core import ControllerCore
    from controller.reassignment import PartitionReassignments

log = logging.getLogger(__name__)


class BrokerNotifications:
    """ISR-change and log-dir notifications and LeaderAndIsr responses over the controller's
    shared state (``core``). ``on_replicas_offline(replicas)`` is the controller's handling
    of replicas gone offline; ``reassignments`` completes reassignments an ISR change
    finished."""

    def __init__(self, core: ControllerCore, reassignments: PartitionReassignments,
                 on_replicas_offline: Callable[[list], Awaitable[None]]) -> None:
        self.core = core
        self.reassignments = reassignments
        self._on_replicas_offline = on_replicas_offline
        put = core.event_manager.put
        self._isr_change = ChildChangeWatch(zd.IsrChangeNotificationZNode.path,
                                            lambda: put(ev.IsrChangeNotification()))
        self._log_dir_event = ChildChangeWatch(zd.LogDirEventNotificationZNode.path,
                                               lambda: put(ev.LogDirEventNotification()))

    async def _process_isr_change_notification(self, _e) -> None:
        if not self.core.is_active:
            return
        ctx = self.core.context
        names = await self.core.zk.get_isr_change_notifications()
        try:
            tps = await self.core.zk.get_partitions_from_isr_change_notifications(names)
            if tps:
                ctx.leadership.update(await self.core.zk.get_partition_states(tps))
                self.core.send_update_metadata_request(sorted(ctx.live_or_shutting_down_broker_ids),
                                                       tps)
                for tp in tps:
                    if tp in ctx.partitions_being_reassigned:
                        await self.reassignments.maybe_complete_reassignment(tp)
        finally:
            await self.core.zk.delete_isr_change_notifications(names, ctx.epoch_zk_version)

    async def _process_log_dir_event_notification(self, _e) -> None:
        if not self.core.is_active:
            return
        names = await self.core.zk.get_log_dir_event_notifications()
        try:
            brokers = await self.core.zk.get_broker_ids_from_log_dir_events(names)
            if brokers:
                log.info("Handling log directory failure for brokers %s",
                         ",".join(map(str, brokers)))
                replicas = self.core.context.replicas_on_brokers(set(brokers))
                await self.core.replica_sm.handle_state_changes(replicas, ReplicaState.ONLINE)
        finally:
            await self.core.zk.delete_log_dir_event_notifications(
                names, self.core.context.epoch_zk_version)

    def on_leader_and_isr_response(self, response, broker_id: int) -> None:
        self.core.event_manager.put(ev.LeaderAndIsrResponseReceived(response, broker_id))

    async def _process_leader_and_isr_response(self, e: ev.LeaderAndIsrResponseReceived) -> None:
        if not self.core.is_active:
            return
        if e.response.error_code:
            log.error("Received error %d in LeaderAndIsr response from broker %d",
                      e.response.error_code, e.broker_id)
            return
        ctx = self.core.context
        offline: set[TopicPartition] = set()
        online: set[TopicPartition] = set()
        for tp, code in _partition_errors(e.response, ctx.topic_names):
            if code == ErrorCode.KAFKA_STORAGE_ERROR:
                offline.add(tp)
            elif code == ErrorCode.NONE:
                online.add(tp)
        before = ctx.replicas_on_offline_dirs.get(e.broker_id, set())
        now = (before - online) | offline
        if now:
            ctx.replicas_on_offline_dirs[e.broker_id] = now
        else:
            ctx.replicas_on_offline_dirs.pop(e.broker_id, None)
        new = sorted(now - before)
        if new:
            log.info("Mark replicas %s on broker %d as offline",
                     ",".join(f"{t}-{p}" for t, p in new), e.broker_id)
            await self._on_replicas_offline([(tp, e.broker_id) for tp in new])

    def register_watches(self) -> None:
        zkc = self.core.zk.zk
        zkc.register_znode_child_change_handler(self._isr_change)
        zkc.register_znode_child_change_handler(self._log_dir_event)

    def unregister_watches(self) -> None:
        for path in (zd.IsrChangeNotificationZNode.path, zd.LogDirEventNotificationZNode.path):
            self.core.zk.zk.unregister_znode_child_change_handler(path)

    async def delete_stale_notifications(self) -> None:
        """On failover: ISR changes are re-read with every state; log dir events are
        replaced by the LeaderAndIsr every replica gets (Kafka deletes both)."""
        ezv = self.core.context.epoch_zk_version
        await self.core.zk.delete_all_children(zd.IsrChangeNotificationZNode.path, ezv)
        await self.core.zk.delete_all_children(zd.LogDirEventNotificationZNode.path, ezv)

    def handlers(self) -> dict:
        return {
            ev.IsrChangeNotification: self._process_isr_change_notification,
            ev.LogDirEventNotification: self._process_log_dir_event_notification,
            ev.LeaderAndIsrResponseReceived: self._process_leader_and_isr_response,
        }


def _partition_errors(response, topic_names: dict):
    """``(tp, error code)`` of a LeaderAndIsr response: by topic id (v5+) or by name."""
    topics = getattr(response, "topics", None)
    if topics:
        for t in topics:
            name = topic_names.get(t.topic_id)
            if name is not None:
                for pe in t.partition_errors:
                    yield (name, pe.partition_index), pe.error_code
    for pe in getattr(response, "partition_errors", None) or ():
        yield (pe.topic_name, pe.partition_index), pe.error_code
