"""Partition reassignment (KIP-455) of the ZooKeeper controller (a collaborator of KafkaController).

Sources: AlterPartitionReassignments (a target replica list, or null = cancel), and the
``/admin/reassign_partitions`` znode (kafka-reassign-partitions' JSON). The latest request
for a partition wins (an API reassignment removes the partition from the znode).

With RS = replicas, ORS = original, TRS = target, AR = TRS - ORS (adding), RR = ORS - TRS
(removing), as Kafka's ``onPartitionReassignment``:

- U1/U2: ``/brokers/topics/<t>`` and memory get RS = TRS + ORS (distinct), AR, RR (fenced
  write); replicas dropped from a superseded reassignment are stopped.
- Phase A (TRS not all in the ISR): leader epoch + 1 (conditional write), LeaderAndIsr to ORS
  and (is_new) AR; AR replicas -> NewReplica. The new replicas must catch up and be added to
  the ISR by the leader (AlterPartition), which brings phase B.
- Phase B (TRS within the ISR): AR -> OnlineReplica; RS = TRS in memory; a new leader from
  TRS if the leader is leaving or dead (Reassign strategy), else leader epoch + 1; RR ->
  OfflineReplica (out of the ISR) -> deletion (StopReplica delete=true) -> NonExistent;
  ``/brokers/topics/<t>`` written with RS = TRS (fenced); the partition leaves the znode and
  the in-progress set; UpdateMetadata to every broker; topic deletion may resume.

Validation (API): INVALID_REPLICA_ASSIGNMENT (empty, duplicates, negative ids, adding brokers
that are not live), UNKNOWN_TOPIC_OR_PARTITION (unknown or being deleted),
NO_REASSIGNMENT_IN_PROGRESS (cancelling nothing); NOT_CONTROLLER on a non-controller.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from controller import controller_events as ev
from controller.context import (
    PartitionState,
    ReplicaState,
    TopicPartition,
    is_being_reassigned,
    origin_replicas,
    reassign_to,
    target_replicas,
)
from controller.controller_core import NodeChangeWatch
from controller.partition_state_machine import REASSIGN, StateChangeFailedError, new_leader_and_isr
from controller.zk_data import ReassignPartitionsZNode, ReplicaAssignment
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from controller.controller_core import ControllerCore

log = logging.getLogger(__name__)


class PartitionReassignments:
    """Reassignments over the controller's shared state (``core``); ``watch`` is the
    ``/admin/reassign_partitions`` creation watch the controller registers on failover."""

    def __init__(self, core: ControllerCore) -> None:
        self.core = core
        self.watch = NodeChangeWatch(
            ReassignPartitionsZNode.path,
            on_create=lambda: core.event_manager.put(ev.ZkPartitionReassignment()))

    # ------------------------------------------------------------------ public API

    async def alter_partition_reassignments(
            self, reassignments: dict[TopicPartition, list[int] | None]) -> tuple[int, dict]:
        """``(top-level error, {tp: (error code, message)})``; None target = cancel."""
        e = ev.ApiPartitionReassignment(reassignments)
        self.core.event_manager.put(e)
        return await e.future

    async def list_partition_reassignments(self, partitions: set[TopicPartition] | None
                                           ) -> tuple[int, dict[TopicPartition, ReplicaAssignment]]:
        e = ev.ListPartitionReassignments(partitions)
        self.core.event_manager.put(e)
        return await e.future

    # ------------------------------------------------------------------ core

    async def initialize(self) -> None:
        resumed = await self._process_zk_partition_reassignment(None)
        await self.maybe_resume_reassignments(lambda tp, _a: tp not in resumed)

    async def maybe_resume_reassignments(self, should_resume) -> None:
        ctx = self.core.context
        for tp in sorted(ctx.partitions_being_reassigned):
            a = ctx.partition_full_replica_assignment(tp)
            if should_resume(tp, a):
                await self.on_partition_reassignment(tp, a)

    async def on_partition_reassignment(self, tp: TopicPartition,
                                        reassignment: ReplicaAssignment) -> None:
        self.core.deletion.mark_topic_ineligible_for_deletion({tp[0]},
                                                              "topic reassignment in progress")
        await self._update_current_reassignment(tp, reassignment)
        if not await self._is_reassignment_complete(tp, reassignment):
            await self._update_leader_epoch_and_send_request(tp, reassignment)
            await self.core.replica_sm.handle_state_changes(
                [(tp, r) for r in reassignment.adding_replicas], ReplicaState.NEW)
            return
        ctx = self.core.context
        await self.core.replica_sm.handle_state_changes(
            [(tp, r) for r in reassignment.adding_replicas], ReplicaState.ONLINE)
        completed = ReplicaAssignment(target_replicas(reassignment))
        ctx.update_partition_full_replica_assignment(tp, completed)
        await self._move_reassigned_partition_leader_if_required(tp, completed)
        await self._stop_removed_replicas(tp, list(reassignment.removing_replicas))
        await self._update_replica_assignment_for_partition(tp, completed)
        await self._remove_partition_from_reassigning_partitions(tp, completed)
        self.core.send_update_metadata_request(sorted(ctx.live_or_shutting_down_broker_ids), [tp])
        await self.core.deletion.resume_deletion_for_topics({tp[0]})

    async def _update_current_reassignment(self, tp: TopicPartition,
                                           reassignment: ReplicaAssignment) -> None:
        ctx = self.core.context
        current = ctx.partition_full_replica_assignment(tp)
        if current != reassignment:
            await self._update_replica_assignment_for_partition(tp, reassignment)
            ctx.update_partition_full_replica_assignment(tp, reassignment)
            unneeded = [r for r in current.replicas if r not in reassignment.replicas]
            if unneeded:
                await self._stop_removed_replicas(tp, unneeded)
        ctx.partitions_being_reassigned.add(tp)

    async def _is_reassignment_complete(self, tp: TopicPartition,
                                        a: ReplicaAssignment) -> bool:
        if not is_being_reassigned(a):
            return True
        state = (await self.core.zk.get_partition_states([tp])).get(tp)
        return state is not None and set(target_replicas(a)) <= set(state.isr)

    async def maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        a = self.core.context.partition_full_replica_assignment(tp)
        if await self._is_reassignment_complete(tp, a):
            log.info("Target replicas %s have all caught up with the leader for reassigning "
                     "partition %s-%d", list(target_replicas(a)), *tp)
            await self.on_partition_reassignment(tp, a)

    async def _move_reassigned_partition_leader_if_required(self, tp: TopicPartition,
                                                            a: ReplicaAssignment) -> None:
        ctx = self.core.context
        leader = ctx.leadership[tp].leader if tp in ctx.leadership else -1
        if leader not in a.replicas:
            log.info("Leader %d for partition %s-%d being reassigned, is not in the new list of "
                     "replicas %s. Re-electing leader", leader, *tp, list(a.replicas))
            await self.core.partition_sm.handle_state_changes([tp], PartitionState.ONLINE, REASSIGN)
        elif ctx.is_replica_online(leader, tp):
            await self._update_leader_epoch_and_send_request(tp, a)
        else:
            await self.core.partition_sm.handle_state_changes([tp], PartitionState.ONLINE, REASSIGN)

    async def _stop_removed_replicas(self, tp: TopicPartition,
                                     removed: list[int]) -> None:
        replicas = [(tp, r) for r in removed]
        rsm = self.core.replica_sm
        await rsm.handle_state_changes(replicas, ReplicaState.OFFLINE)
        await rsm.handle_state_changes(replicas, ReplicaState.DELETION_STARTED)
        await rsm.handle_state_changes(replicas, ReplicaState.DELETION_SUCCESSFUL)
        await rsm.handle_state_changes(replicas, ReplicaState.NON_EXISTENT)

    async def _update_replica_assignment_for_partition(self, tp: TopicPartition,
                                                       a: ReplicaAssignment) -> None:
        ctx = self.core.context
        partitions = dict(ctx.partition_assignments_for_topic(tp[0]))
        partitions[tp[1]] = a
        try:
            await self.core.zk.set_topic_assignment(tp[0], ctx.topic_ids.get(tp[0]), partitions,
                                                    ctx.epoch_zk_version)
        except Exception as e:
            from controller.zk_client import NoNodeError

            if isinstance(e, NoNodeError):
                raise StateChangeFailedError(f"Failed to update assignment for {tp[0]}-{tp[1]} "
                                             "since the topic has no current assignment") from None
            raise
        log.info("Successfully updated assignment of partition %s-%d to %s", *tp, a)

    async def _update_leader_epoch_and_send_request(self, tp: TopicPartition,
                                                    a: ReplicaAssignment) -> None:
        ctx = self.core.context
        state = await self._update_leader_epoch(tp)
        if state is None:
            log.error("Failed to send LeaderAndIsr request with new replica assignment %s to "
                      "leader for partition being reassigned %s-%d", a, *tp)
            return
        self.core.batch.new_batch()
        self.core.batch.add_leader_and_isr(origin_replicas(a), tp, state, a, is_new=False)
        self.core.batch.add_leader_and_isr(a.adding_replicas, tp, state, a, is_new=True)
        self.core.batch.send_requests_to_brokers(ctx.epoch)

    async def _update_leader_epoch(self, tp: TopicPartition):
        """Leader epoch + 1 without another change (conditional write, retried)."""
        ctx = self.core.context
        while True:
            state = (await self.core.zk.get_partition_states([tp])).get(tp)
            if state is None:
                raise StateChangeFailedError(f"Cannot update leader epoch for partition "
                                             f"{tp[0]}-{tp[1]} as leaderAndIsr path is empty")
            if state.controller_epoch > ctx.epoch:
                raise StateChangeFailedError("Leader and isr path written by another "
                                             "controller. Aborting state change by this "
                                             "controller")
            new = new_leader_and_isr(state, state.leader, state.isr, ctx.epoch)
            result = await self.core.zk.update_leader_and_isr({tp: new}, ctx.epoch_zk_version)
            done = result.finished.get(tp)
            if isinstance(done, Exception):
                raise done
            if done is not None:
                ctx.leadership[tp] = done
                return done

    async def _remove_partition_from_reassigning_partitions(self, tp: TopicPartition,
                                                            a: ReplicaAssignment) -> None:
        ctx = self.core.context
        if tp not in ctx.partitions_being_reassigned:
            raise StateChangeFailedError("Cannot remove a reassigning partition because it is "
                                         "not present in memory")
        await self._maybe_remove_from_zk_reassignment(
            lambda p, replicas: p == tp and list(replicas) == list(a.replicas))
        ctx.partitions_being_reassigned.discard(tp)

    async def _maybe_remove_from_zk_reassignment(self, should_remove) -> None:
        ctx = self.core.context
        if not await self.core.zk.reassign_partitions_in_progress():
            return
        current = await self.core.zk.get_partition_reassignment()
        kept = {tp: r for tp, r in current.items() if not should_remove(tp, r)}
        removed = sorted(set(current) - set(kept))
        log.info("Removing partitions %s from the list of reassigned partitions in zookeeper",
                 removed)
        if not kept:
            log.info("No more partitions need to be reassigned. Deleting zk path "
                     "/admin/reassign_partitions")
            await self.core.zk.delete_partition_reassignment(ctx.epoch_zk_version)
            self.core.event_manager.put(ev.ZkPartitionReassignment())
        elif removed:
            await self.core.zk.set_or_create_partition_reassignment(kept, ctx.epoch_zk_version)

    async def _maybe_trigger_partition_reassignment(self, reassignments: dict) -> dict:
        ctx = self.core.context
        out = {}
        for tp, a in reassignments.items():
            if self.core.deletion.is_topic_queued_up_for_deletion(tp[0]):
                log.info("Skipping reassignment of %s-%d since the topic is currently being "
                         "deleted", *tp)
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif ctx.partition_replica_assignment(tp):
                try:
                    await self.on_partition_reassignment(tp, a)
                    out[tp] = (ErrorCode.NONE, None)
                except Exception as e:
                    from controller.kafka_zk_client import lost_controllership

                    if lost_controllership(e):
                        raise
                    log.exception("Error completing reassignment of partition %s-%d", *tp)
                    out[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, None)
            else:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
        return out

    def _maybe_build_reassignment(self, tp: TopicPartition,
                                  target: list[int] | None) -> ReplicaAssignment | None:
        a = self.core.context.partition_full_replica_assignment(tp)
        if is_being_reassigned(a):
            return reassign_to(a, target if target is not None else origin_replicas(a))
        if target is None:
            return None
        return reassign_to(a, target)

    def _validate_replicas(self, tp: TopicPartition, replicas: list[int]):
        if not replicas:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, \
                "Empty replica list specified in partition reassignment."
        if len(set(replicas)) != len(replicas):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, \
                f"Duplicate replica ids in partition reassignment replica list: {replicas}"
        if any(r < 0 for r in replicas):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {replicas}"
        ctx = self.core.context
        new = reassign_to(ctx.partition_full_replica_assignment(tp), replicas)
        if not set(new.adding_replicas) <= ctx.live_broker_ids:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                f"Replica assignment has brokers that are not alive. Replica list: "
                f"{list(new.adding_replicas)}, live broker list: {sorted(ctx.live_broker_ids)}")
        return None

    # ------------------------------------------------------------------ events

    async def _process_zk_partition_reassignment(self, _e) -> set:
        if not self.core.is_active or not \
                await self.core.zk.zk.register_znode_change_handler_and_check_existence(
                    self.watch):
            return set()
        results: dict = {}
        to_reassign = {}
        for tp, target in (await self.core.zk.get_partition_reassignment()).items():
            a = self._maybe_build_reassignment(tp, target)
            if a is None:
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            else:
                to_reassign[tp] = a
        results.update(await self._maybe_trigger_partition_reassignment(to_reassign))
        failed = {tp for tp, (code, _) in results.items() if code}
        if failed:
            log.warning("Failed reassignment through zk with the following errors: %s",
                        {tp: results[tp] for tp in failed})
            await self._maybe_remove_from_zk_reassignment(lambda tp, _r: tp in failed)
        return {tp for tp, (code, _) in results.items() if not code}

    async def _process_api_partition_reassignment(self, e: ev.ApiPartitionReassignment) -> None:
        if not self.core.is_active:
            e.complete((ErrorCode.NOT_CONTROLLER, {}))
            return
        results: dict = {}
        to_reassign = {}
        for tp, target in e.reassignments.items():
            err = self._validate_replicas(tp, target) if target is not None else None
            if err is not None:
                results[tp] = err
                continue
            a = self._maybe_build_reassignment(tp, target)
            if a is None:
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            else:
                to_reassign[tp] = a
        await self._maybe_remove_from_zk_reassignment(lambda tp, _r: tp in to_reassign)
        results.update(await self._maybe_trigger_partition_reassignment(to_reassign))
        e.complete((ErrorCode.NONE, results))

    async def _process_list_partition_reassignments(self, e: ev.ListPartitionReassignments) -> None:
        ctx = self.core.context
        if not self.core.is_active:
            e.complete((ErrorCode.NOT_CONTROLLER, {}))
            return
        tps = e.partitions if e.partitions is not None else ctx.partitions_being_reassigned
        out = {}
        for tp in sorted(tps):
            a = ctx.partition_full_replica_assignment(tp)
            if is_being_reassigned(a):
                out[tp] = a
        e.complete((ErrorCode.NONE, out))

    def handlers(self) -> dict:
        return {
            ev.ZkPartitionReassignment: self._process_zk_partition_reassignment,
            ev.ApiPartitionReassignment: self._process_api_partition_reassignment,
            ev.ListPartitionReassignments:
                self._process_list_partition_reassignments,
        }
