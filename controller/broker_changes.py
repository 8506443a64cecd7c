"""Broker membership of the ZooKeeper controller (a collaborator of KafkaController).

Brokers (``BrokerChange``): new ones get UpdateMetadata with every partition, LeaderAndIsr
for their replicas, elections for offline partitions, and resumed reassignments/deletions;
dead ones lose their replicas (OfflineReplica: out of the ISR) and their leaderships
(OfflinePartition -> elected from the live ISR); a broker whose epoch (czxid) grew was
bounced (session expiry and re-registration): handled as a failure then a startup.
``/brokers/ids/<id>`` data changes (``BrokerModifications``: endpoints, features, rack)
update the cached broker and send UpdateMetadata to every broker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from controller import controller_events as ev
from controller import zk_data as zd
from controller.context import PartitionState, ReplicaState
from controller.controller_core import ELECTION_PART, ChildChangeWatch, NodeChangeWatch
from controller.partition_state_machine import elected

if TYPE_CHECKING:
    from controller.controller_core import ControllerCore
    from controller.reassignment import PartitionReassignments

log = logging.getLogger(__name__)


class BrokerChanges:
    """Broker startups, failures and modifications over the controller's shared state
    (``core``); resumes reassignments through ``reassignments``. ``watch`` is the
    ``/brokers/ids`` child watch the controller registers on failover."""

    def __init__(self, core: ControllerCore, reassignments: PartitionReassignments) -> None:
        self.core = core
        self.reassignments = reassignments
        self._broker_handlers: dict[int, NodeChangeWatch] = {}
        self.watch = ChildChangeWatch(zd.BrokerIdsZNode.path,
                                      lambda: core.event_manager.put(ev.BrokerChange()))

    def unregister_all(self) -> None:
        self.unregister_broker_modifications_handlers(list(self._broker_handlers))

    def handlers(self) -> dict:
        return {
            ev.BrokerChange: self._process_broker_change,
            ev.BrokerModifications: self._process_broker_modification,
        }

    async def register_broker_modifications_handlers(self, broker_ids) -> None:
        for b in broker_ids:
            h = NodeChangeWatch(zd.BrokerIdZNode.path(b), on_change=lambda b=b:
                                self.core.event_manager.put(ev.BrokerModifications(b)))
            self._broker_handlers[b] = h
            await self.core.zk.zk.register_znode_change_handler_and_check_existence(h)

    def unregister_broker_modifications_handlers(self, broker_ids) -> None:
        for b in broker_ids:
            h = self._broker_handlers.pop(b, None)
            if h is not None:
                self.core.zk.zk.unregister_znode_change_handler(h.path)

    async def _process_broker_change(self, _e) -> None:
        if not self.core.is_active:
            return
        ctx = self.core.context
        current = await self.core.zk.get_all_brokers_and_epochs()
        cur_ids = set(current)
        known = ctx.live_or_shutting_down_broker_ids
        new_ids = cur_ids - known
        dead_ids = known - cur_ids
        bounced = {b for b in cur_ids & known if current[b][1] > ctx.live_broker_epochs[b]}
        log.info("Newly added brokers: %s, deleted brokers: %s, bounced brokers: %s, all live "
                 "brokers: %s", _ids(new_ids), _ids(dead_ids), _ids(bounced), _ids(cur_ids))
        for b in new_ids:
            self.core.channel.add_broker(current[b][0])
        for b in bounced:
            await self.core.channel.remove_broker(b)
            self.core.channel.add_broker(current[b][0])
        for b in dead_ids:
            await self.core.channel.remove_broker(b)
        if new_ids:
            ctx.add_live_brokers({b: current[b] for b in new_ids})
            await self._on_broker_startup(sorted(new_ids))
        if bounced:
            ctx.remove_live_brokers(bounced)
            await self._on_broker_failure(sorted(bounced))
            ctx.add_live_brokers({b: current[b] for b in bounced})
            await self._on_broker_startup(sorted(bounced))
        if dead_ids:
            ctx.remove_live_brokers(dead_ids)
            await self._on_broker_failure(sorted(dead_ids))
        if new_ids or dead_ids or bounced:
            log.info("Updated broker epochs cache: %s", dict(ctx.live_broker_epochs))

    async def _on_broker_startup(self, new_brokers: list[int]) -> None:
        ctx = self.core.context
        log.info("New broker startup callback for %s", _ids(new_brokers))
        for b in new_brokers:
            ctx.replicas_on_offline_dirs.pop(b, None)
        existing = sorted(ctx.live_or_shutting_down_broker_ids - set(new_brokers))
        self.core.send_update_metadata_request(existing)
        self.core.send_update_metadata_request(new_brokers, ctx.partitions_with_leaders())
        replicas = ctx.replicas_on_brokers(set(new_brokers))
        await self.core.replica_sm.handle_state_changes(replicas, ReplicaState.ONLINE)
        await self.core.partition_sm.trigger_online_partition_state_change()
        await self.reassignments.maybe_resume_reassignments(
            lambda tp, a: any(r in new_brokers for r in a.replicas if r not in
                              a.removing_replicas))
        deletion = self.core.deletion
        deleting = {tp[0] for tp, _ in replicas if deletion.is_topic_queued_up_for_deletion(tp[0])}
        if deleting:
            log.info("Some replicas for topics scheduled for deletion %s are on the newly "
                     "restarted brokers %s. Signaling restart of topic deletion for these "
                     "topics", sorted(deleting), _ids(new_brokers))
            await self.core.deletion.resume_deletion_for_topics(deleting)
        await self.register_broker_modifications_handlers(new_brokers)

    async def _on_broker_failure(self, dead: list[int]) -> None:
        ctx = self.core.context
        log.info("Broker failure callback for %s", _ids(dead))
        for b in dead:
            ctx.replicas_on_offline_dirs.pop(b, None)
        was_shutting = [b for b in dead if b in ctx.shutting_down_broker_ids]
        ctx.shutting_down_broker_ids -= set(dead)
        if was_shutting:
            log.info("Removed %s from list of shutting down brokers.", _ids(was_shutting))
        await self.on_replicas_become_offline(ctx.replicas_on_brokers(set(dead)))
        self.unregister_broker_modifications_handlers(dead)

    async def on_replicas_become_offline(self, replicas) -> None:
        ctx = self.core.context
        deletion = self.core.deletion
        for_deletion, not_for_deletion = [], []
        for r in replicas:
            (for_deletion if deletion.is_topic_queued_up_for_deletion(r[0][0])
             else not_for_deletion).append(r)
        offline_leader = ctx.partitions_with_offline_leader()
        # two waves: the elections first, in parts as ZooKeeper commits them (the
        # partitions the dead brokers led are led again as soon as their states are
        # written), then the ISR shrinks, one LeaderAndIsr per broker (without the
        # partitions the elections just sent)
        async with self.core.coalesced_requests(flush_every=ELECTION_PART):
            await self.core.partition_sm.handle_state_changes(offline_leader,
                                                              PartitionState.OFFLINE)
            results = await self.core.partition_sm.trigger_online_partition_state_change()
        done = elected(results)
        if done:
            await self.core.wait_requests_answered()
        with self.core.replica_sm.already_sent(done):
            async with self.core.coalesced_requests():
                await self.core.replica_sm.handle_state_changes(not_for_deletion,
                                                                ReplicaState.OFFLINE)
        if for_deletion:
            await self.core.deletion.fail_replica_deletion(for_deletion)
        if not not_for_deletion and all(isinstance(r, Exception) for r in results.values()):
            self.core.send_update_metadata_request(sorted(ctx.live_or_shutting_down_broker_ids))

    async def _process_broker_modification(self, e: ev.BrokerModifications) -> None:
        if not self.core.is_active:
            return
        ctx = self.core.context
        new = await self.core.zk.get_broker(e.broker_id)
        old = ctx.live_brokers.get(e.broker_id)
        if new is None or old is None:
            return
        info, _epoch = new
        if info.endpoints != old.endpoints or info.features != old.features or \
                info.rack != old.rack:
            log.info("Updated broker metadata: %s -> %s", old, info)
            ctx.live_brokers[e.broker_id] = info
            self.core.send_update_metadata_request(sorted(ctx.live_or_shutting_down_broker_ids))


def _ids(ids) -> str:
    return ",".join(str(i) for i in sorted(ids))
