"""Leadership requests of the ZooKeeper controller (a collaborator of KafkaController).

- ElectLeaders (KIP-460) and ``/admin/preferred_replica_election``: preferred elections move
  leadership to the first replica when it is live and in the ISR (else
  PREFERRED_LEADER_NOT_AVAILABLE); unclean elections elect from any live replica, only for
  partitions without a live leader. ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION,
  INVALID_TOPIC_EXCEPTION (topic being deleted).
- Auto leader rebalance (``auto.leader.rebalance.enable``): every
  ``leader.imbalance.check.interval.seconds`` (first check 5 s after failover), per preferred
  broker the share of its partitions led by another broker; above
  ``leader.imbalance.per.broker.percentage`` %, preferred elections for those partitions
  whose preferred replica can lead.
- ControlledShutdown (v0-v3): the broker joins the shutting-down set; partitions it leads
  (replication factor > 1) get a new leader from the ISR (ControlledShutdown strategy), it
  leaves the ISR of partitions it follows (StopReplica without delete). Answers the
  partitions it still leads that could move (another live ISR member that is not shutting
  down): RF 1 leaders and partitions with no other live ISR member do not hold the shutdown
  back (Kafka counts the latter). NOT_CONTROLLER, STALE_BROKER_EPOCH, BROKER_NOT_AVAILABLE.
- AlterPartition (KIP-497) from partition leaders, validated as Kafka does:
  STALE_BROKER_EPOCH (unknown broker or other epoch), UNKNOWN_TOPIC_ID /
  UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER (the request carries a newer leader or
  partition epoch than ours), FENCED_LEADER_EPOCH (older leader epoch), INVALID_UPDATE_VERSION
  (older partition epoch, or lost the conditional write), INVALID_REQUEST (recovery-state
  rules), INELIGIBLE_REPLICA (v2+; OPERATION_NOT_ATTEMPTED before: an ISR member is not a
  live broker); an ISR already equal to the request is answered as is (idempotent). The new
  ISR is written conditionally (fenced), every broker gets UpdateMetadata, and reassignments
  waiting for that ISR complete.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from controller import controller_events as ev
from controller.context import PartitionState, ReplicaState, TopicPartition
from controller.controller_core import NodeChangeWatch
from controller.kafka_zk_client import lost_controllership
from controller.partition_state_machine import (
    CONTROLLED_SHUTDOWN,
    PREFERRED,
    ChangeLog,
    OfflineStrategy,
    StateChangeFailedError,
)
from controller.zk_data import LeaderIsrAndControllerEpoch, PreferredReplicaElectionZNode
from protocol.errors import ErrorCode
from protocol.messages import AlterPartitionResponse

if TYPE_CHECKING:
    from controller.controller_core import ControllerCore
    from controller.reassignment import PartitionReassignments

log = logging.getLogger(__name__)

ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1
ZERO_UUID = uuid.UUID(int=0)
State = LeaderIsrAndControllerEpoch


class LeadershipRequests:
    """Elections, auto rebalance, ControlledShutdown and AlterPartition over the controller's
    shared state (``core``); completes reassignments through ``reassignments``.
    ``preferred_watch`` is the ``/admin/preferred_replica_election`` creation watch the
    controller registers on failover."""

    def __init__(self, core: ControllerCore, reassignments: PartitionReassignments) -> None:
        self.core = core
        self.reassignments = reassignments
        self.preferred_watch = NodeChangeWatch(PreferredReplicaElectionZNode.path,
                                               on_create=self._put_zk_preferred_election)
        self._rebalance_timer: asyncio.TimerHandle | None = None
        self._last_refusal: tuple[int, frozenset] | None = None  # INFO once per repeat

    # ------------------------------------------------------------------ public API

    async def elect_leaders(self, partitions: set[TopicPartition] | None,
                            election_type: int) -> dict[TopicPartition, tuple[int, str | None]]:
        """Admin-triggered election; ``{tp: (error code, message)}`` (leader elected -> NONE).
        ``partitions=None`` = every partition (only elected or failed ones are reported)."""
        e = ev.ReplicaLeaderElection(partitions, election_type, ev.ADMIN_CLIENT_TRIGGERED)
        self.core.event_manager.put(e)
        return await e.future

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int
                                  ) -> tuple[int, list[TopicPartition]]:
        e = ev.ControlledShutdown(broker_id, broker_epoch)
        self.core.event_manager.put(e)
        return await e.future

    async def alter_partition(self, request, version: int):
        e = ev.AlterPartitionReceived(request, version)
        self.core.event_manager.put(e)
        return await e.future

    def _put_zk_preferred_election(self) -> None:
        self.core.event_manager.put(ev.ReplicaLeaderElection(None, ELECTION_PREFERRED,
                                                             ev.ZK_TRIGGERED))

    def enable_topic_unclean_leader_election(self, topic: str) -> None:
        if self.core.is_active:
            self.core.event_manager.put(ev.TopicUncleanLeaderElectionEnable(topic))

    def enable_default_unclean_leader_election(self) -> None:
        self.core.event_manager.put(ev.UncleanLeaderElectionEnable())

    # ------------------------------------------------------------------ elections

    async def on_replica_election(self, partitions, election_type: int,
                                  trigger: str) -> dict[TopicPartition, State | Exception]:
        partitions = sorted(partitions)
        if not partitions and trigger == ev.ADMIN_CLIENT_TRIGGERED:
            return {}
        if partitions:
            log.info("Starting replica leader election (%s) for partitions %s triggered by %s",
                     "PREFERRED" if election_type == ELECTION_PREFERRED else "UNCLEAN",
                     ",".join(f"{t}-{p}" for t, p in partitions), trigger)
        try:
            strategy = PREFERRED if election_type == ELECTION_PREFERRED else \
                OfflineStrategy(trigger == ev.ADMIN_CLIENT_TRIGGERED)
            results = await self.core.partition_sm.handle_state_changes(
                partitions, PartitionState.ONLINE, strategy)
            if trigger != ev.ADMIN_CLIENT_TRIGGERED:
                for tp, r in results.items():
                    if isinstance(r, Exception):
                        log.error("Error completing replica leader election for partition "
                                  "%s-%d: %s", *tp, r)
            return results
        finally:
            if trigger != ev.ADMIN_CLIENT_TRIGGERED:
                await self._remove_partitions_from_preferred_replica_election(
                    partitions, trigger == ev.AUTO_TRIGGERED)

    async def _remove_partitions_from_preferred_replica_election(
            self, partitions, is_auto: bool) -> None:
        ctx = self.core.context
        for tp in partitions:
            state = ctx.leadership.get(tp)
            replicas = ctx.partition_replica_assignment(tp)
            if state is not None and replicas and state.leader == replicas[0]:
                log.info("Partition %s-%d completed preferred replica leader election. New "
                         "leader is %d", *tp, replicas[0])
            elif state is not None and replicas:
                log.warning("Partition %s-%d failed to complete preferred replica leader "
                            "election to %d. Leader is still %d", *tp, replicas[0], state.leader)
        if not is_auto:
            await self.core.zk.delete_preferred_replica_election(ctx.epoch_zk_version)
            self._put_zk_preferred_election()

    async def fetch_pending_preferred_replica_elections(self) -> set[TopicPartition]:
        ctx = self.core.context
        pending = set()
        for tp in await self.core.zk.get_preferred_replica_election():
            replicas = ctx.partition_replica_assignment(tp)
            state = ctx.leadership.get(tp)
            if not replicas or (state is not None and state.leader == replicas[0]):
                continue
            if self.core.deletion.is_topic_queued_up_for_deletion(tp[0]):
                continue
            pending.add(tp)
        log.info("Resuming preferred replica election for partitions: %s", sorted(pending))
        return pending

    async def _process_replica_leader_election(self, e: ev.ReplicaLeaderElection) -> None:
        ctx = self.core.context
        if not self.core.is_active:
            e.preempt()
            return
        admin = e.trigger == ev.ADMIN_CLIENT_TRIGGERED
        zkc = self.core.zk.zk
        if not admin and not await zkc.register_znode_change_handler_and_check_existence(
                self.preferred_watch):
            e.complete({})
            return
        if e.partitions is not None:
            partitions = set(e.partitions)
        elif admin:
            partitions = set(ctx.all_partitions())
        else:
            partitions = await self.core.zk.get_preferred_replica_election()
        known_all = set(ctx.all_partitions())
        unknown = {tp for tp in partitions if tp not in known_all}
        known = partitions - unknown
        deleting = {tp for tp in known if self.core.deletion.is_topic_queued_up_for_deletion(tp[0])}
        live = known - deleting
        electable, valid_leader = set(), set()
        for tp in live:
            state = ctx.leadership.get(tp)
            leader = state.leader if state is not None else -1
            if e.election_type == ELECTION_PREFERRED:
                needs = leader != ctx.partition_replica_assignment(tp)[0]
            else:
                needs = leader == -1 or not ctx.is_live_broker(leader)
            (electable if needs else valid_leader).add(tp)
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp, r in (await self.on_replica_election(electable, e.election_type,
                                                      e.trigger)).items():
            if isinstance(r, StateChangeFailedError):
                code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if \
                    e.election_type == ELECTION_PREFERRED else \
                    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                results[tp] = (code, str(r))
            elif isinstance(r, Exception) and lost_controllership(r):
                results[tp] = (ErrorCode.NOT_CONTROLLER, None)
            elif isinstance(r, Exception):
                results[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, str(r))
            else:
                results[tp] = (ErrorCode.NONE, None)
        everything = admin and e.partitions is None
        if not everything:
            for tp in valid_leader:
                results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None)
            for tp in deleting:
                results[tp] = (ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
            for tp in unknown:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               "The partition does not exist.")
        e.complete(results)

    # ------------------------------------------------------------------ auto rebalance

    def schedule_auto_rebalance(self, delay_s: float) -> None:
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
        self._rebalance_timer = asyncio.get_running_loop().call_later(
            delay_s, lambda: self.core.event_manager.put(ev.AutoPreferredReplicaLeaderElection()))

    def cancel_auto_rebalance(self) -> None:
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None

    async def _process_auto_preferred_replica_leader_election(self, _e) -> None:
        if not self.core.is_active:
            return
        try:
            log.info("Processing automatic preferred replica leader election")
            await self._check_and_trigger_auto_leader_rebalance()
        finally:
            if self.core.is_active:
                self.schedule_auto_rebalance(self.core.config.leader_imbalance_check_interval_s)

    async def _check_and_trigger_auto_leader_rebalance(self) -> None:
        ctx = self.core.context
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in ctx.all_partitions():
            if self.core.deletion.is_topic_queued_up_for_deletion(tp[0]):
                continue
            replicas = ctx.partition_replica_assignment(tp)
            if replicas:
                by_preferred.setdefault(replicas[0], []).append(tp)
        threshold = self.core.config.leader_imbalance_per_broker_percentage / 100.0
        for broker, tps in sorted(by_preferred.items()):
            not_preferred = [tp for tp in tps if tp in ctx.leadership and
                             ctx.leadership[tp].leader != broker]
            ratio = len(not_preferred) / len(tps)
            if ratio > threshold:
                candidates = {tp for tp in not_preferred
                              if not self.core.deletion.is_topic_queued_up_for_deletion(tp[0])
                              and tp[0] in ctx.all_topics and self._can_preferred_lead(tp)}
                if candidates:
                    await self.on_replica_election(candidates, ELECTION_PREFERRED,
                                                   ev.AUTO_TRIGGERED)

    def _can_preferred_lead(self, tp: TopicPartition) -> bool:
        ctx = self.core.context
        replicas = ctx.partition_replica_assignment(tp)
        state = ctx.leadership.get(tp)
        return bool(replicas) and state is not None and \
            ctx.is_replica_online(replicas[0], tp) and replicas[0] in state.isr

    async def _process_unclean_leader_election_enable(self, _e) -> None:
        if self.core.is_active:
            log.info("Unclean leader election has been enabled by default")
            await self.core.partition_sm.trigger_online_partition_state_change()

    async def _process_topic_unclean_leader_election_enable(
            self, e: ev.TopicUncleanLeaderElectionEnable) -> None:
        if self.core.is_active:
            log.info("Unclean leader election has been enabled for topic %s", e.topic)
            await self.core.partition_sm.trigger_online_partition_state_change(e.topic)

    # ------------------------------------------------------------------ controlled shutdown

    async def _process_controlled_shutdown(self, e: ev.ControlledShutdown) -> None:
        ctx = self.core.context
        if not self.core.is_active:
            e.complete((ErrorCode.NOT_CONTROLLER, []))
            return
        if e.broker_epoch != -1:
            cached = ctx.live_broker_epochs.get(e.broker_id)
            if cached is not None and e.broker_epoch < cached:
                log.info("Received controlled shutdown request from an old broker epoch %d for "
                         "broker %d. Current broker epoch is %d.", e.broker_epoch, e.broker_id,
                         cached)
                e.complete((ErrorCode.STALE_BROKER_EPOCH, []))
                return
        log.info("Shutting down broker %d", e.broker_id)
        if e.broker_id not in ctx.live_or_shutting_down_broker_ids:
            e.complete((ErrorCode.BROKER_NOT_AVAILABLE, []))
            return
        ctx.shutting_down_broker_ids.add(e.broker_id)
        to_act = [tp for tp in ctx.partitions_on_broker(e.broker_id)
                  if len(ctx.partition_replica_assignment(tp)) > 1 and tp in ctx.leadership
                  and not self.core.deletion.is_topic_queued_up_for_deletion(tp[0])]
        led = [tp for tp in to_act if ctx.leadership[tp].leader == e.broker_id]
        followed = [tp for tp in to_act if ctx.leadership[tp].leader != e.broker_id]
        await self.core.partition_sm.handle_state_changes(led, PartitionState.ONLINE,
                                                          CONTROLLED_SHUTDOWN)
        self.core.batch.new_batch()
        for tp in followed:
            self.core.batch.add_stop_replica([e.broker_id], tp, delete_partition=False)
        self.core.batch.send_requests_to_brokers(ctx.epoch)
        await self.core.replica_sm.handle_state_changes([(tp, e.broker_id) for tp in followed],
                                                        ReplicaState.OFFLINE)
        e.complete((ErrorCode.NONE, self._leaderships_that_could_move(e.broker_id)))

    def _leaderships_that_could_move(self, broker_id: int
                                     ) -> list[TopicPartition]:
        """The partitions ``broker_id`` still leads that another live, not shutting down
        ISR member could lead (Kafka's replicatedPartitionsBrokerLeads, which also counts
        partitions with no such member: those would make every retry fail and the shutdown
        unclean, though no retry can move them). RF 1 partitions and topics being deleted
        never count."""
        ctx = self.core.context
        return sorted(tp for tp in ctx.partition_leaders_on_broker(broker_id)
                      if len(ctx.partition_replica_assignment(tp)) > 1
                      and any(r != broker_id and ctx.is_live_broker(r)
                              for r in ctx.leadership[tp].isr))

    # ------------------------------------------------------------------ AlterPartition

    async def _process_alter_partition(self, e: ev.AlterPartitionReceived) -> None:
        try:
            responses = await self._try_alter_partition(e)
        except Exception as exc:
            if not e.future.done():
                if lost_controllership(exc) or not self.core.is_active:
                    # deposed while processing: the leader must ask the new controller
                    e.complete(AlterPartitionResponse(error_code=int(ErrorCode.NOT_CONTROLLER)))
                    raise
                log.exception("Error when processing AlterPartition: %r", e.request)
                e.complete(AlterPartitionResponse(error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR)))
                return
            raise
        for tp, r in responses.items():
            if tp in self.core.context.partitions_being_reassigned and isinstance(r, State):
                await self.reassignments.maybe_complete_reassignment(tp)

    async def _try_alter_partition(self, e: ev.AlterPartitionReceived):
        ctx = self.core.context
        req, version = e.request, e.version
        use_ids = version > 1
        if not self.core.is_active:
            e.complete(AlterPartitionResponse(error_code=int(ErrorCode.NOT_CONTROLLER)))
            return {}
        known_epoch = ctx.live_broker_epochs.get(req.broker_id)
        if known_epoch is None or known_epoch != req.broker_epoch:
            log.info("Ignoring AlterPartition due to %s broker epoch %d for broker %d",
                     "unknown" if known_epoch is None else "stale", req.broker_epoch,
                     req.broker_id)
            e.complete(AlterPartitionResponse(error_code=int(ErrorCode.STALE_BROKER_EPOCH)))
            return {}
        wanted: dict[TopicPartition, tuple[int, list[int], int, int]] = {}
        responses: dict[TopicPartition, int | State] = {}
        unknown_ids: list = []
        for t in req.topics:
            name = ctx.topic_names.get(t.topic_id) if use_ids else t.topic_name
            if name is None:
                unknown_ids.append(t)
                continue
            for p in t.partitions:
                isr = [b.broker_id for b in p.new_isr_with_epochs] if version >= 3 \
                    else list(p.new_isr)
                wanted[(name, p.partition_index)] = (p.leader_epoch, isr,
                                                     p.leader_recovery_state, p.partition_epoch)
        adjusted: dict[TopicPartition, State] = {}
        refused: set[int] = set()
        live = ctx.live_broker_ids
        rejected = ChangeLog(logging.INFO, f"Rejecting AlterPartition request from node "
                             f"{req.broker_id} because it specified ineligible replicas in the "
                             "new ISR")
        for tp, (leader_epoch, isr, recovery, partition_epoch) in wanted.items():
            cur = ctx.leadership.get(tp)
            if cur is None:
                responses[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif partition_epoch > cur.partition_epoch or leader_epoch > cur.leader_epoch:
                responses[tp] = ErrorCode.NOT_CONTROLLER
            elif leader_epoch < cur.leader_epoch:
                responses[tp] = ErrorCode.FENCED_LEADER_EPOCH
            elif req.broker_id == cur.leader and list(cur.isr) == isr and \
                    recovery == cur.leader_recovery_state:
                responses[tp] = cur
            elif partition_epoch < cur.partition_epoch:
                responses[tp] = ErrorCode.INVALID_UPDATE_VERSION
            elif recovery == 1 and len(isr) > 1:
                log.info("Rejecting AlterPartition from node %d for %s-%d because leader is "
                         "recovering and ISR is greater than 1: %s", req.broker_id, *tp, isr)
                responses[tp] = ErrorCode.INVALID_REQUEST
            elif cur.leader_recovery_state == 0 and recovery == 1:
                log.info("Rejecting AlterPartition from node %d for %s-%d because the leader "
                         "recovery state cannot change from RECOVERED to RECOVERING",
                         req.broker_id, *tp)
                responses[tp] = ErrorCode.INVALID_REQUEST
            else:
                ineligible = sorted(set(isr) - live)
                if ineligible:
                    refused.update(ineligible)
                    rejected.add(f"{tp[0]}-{tp[1]}: ineligible {ineligible} in {isr}")
                    responses[tp] = ErrorCode.INELIGIBLE_REPLICA if version > 1 \
                        else ErrorCode.OPERATION_NOT_ATTEMPTED
                else:
                    adjusted[tp] = State(req.broker_id, leader_epoch, tuple(isr), ctx.epoch,
                                         partition_epoch, recovery)
        if refused:  # the same refusal again (leaders retry with back-off): DEBUG
            seen = (req.broker_id, frozenset(refused))
            if seen == self._last_refusal:
                rejected.level = logging.DEBUG
            self._last_refusal = seen
        rejected.emit()
        result = await self.core.zk.update_leader_and_isr(adjusted, ctx.epoch_zk_version)
        succeeded = []
        failed = ChangeLog(logging.ERROR, "Failed to update ISR")
        for tp, r in result.finished.items():
            if isinstance(r, Exception) and lost_controllership(r):
                responses[tp] = ErrorCode.NOT_CONTROLLER
            elif isinstance(r, Exception):
                failed.add(f"{tp[0]}-{tp[1]}: {r!r}")
                responses[tp] = ErrorCode.UNKNOWN_SERVER_ERROR
            else:
                responses[tp] = r
                succeeded.append(tp)
        failed.emit()
        stale = ChangeLog(logging.INFO, "Failed to update ISR, bad ZK version")
        for tp in result.retry:
            stale.add(f"{tp[0]}-{tp[1]} to {list(adjusted[tp].isr)}")
            responses[tp] = ErrorCode.INVALID_UPDATE_VERSION
        stale.emit()
        if succeeded:  # what was just written, at the version ZooKeeper gave it (Kafka
            # reads the states back: 66,000 more reads when a restarted broker rejoins)
            ctx.leadership.update({tp: result.finished[tp] for tp in succeeded})
        if wanted:
            self.core.send_update_metadata_request(sorted(ctx.live_or_shutting_down_broker_ids),
                                                   sorted(wanted))
        e.complete(_alter_partition_response(ctx, responses, unknown_ids, use_ids))
        return responses

    def handlers(self) -> dict:
        return {
            ev.ReplicaLeaderElection: self._process_replica_leader_election,
            ev.AutoPreferredReplicaLeaderElection:
                self._process_auto_preferred_replica_leader_election,
            ev.UncleanLeaderElectionEnable: self._process_unclean_leader_election_enable,
            ev.TopicUncleanLeaderElectionEnable:
                self._process_topic_unclean_leader_election_enable,
            ev.ControlledShutdown: self._process_controlled_shutdown,
            ev.AlterPartitionReceived: self._process_alter_partition,
        }


def _alter_partition_response(ctx, responses: dict, unknown_topics: list, use_ids: bool):
    """The answer, partitions in the order they were asked (Kafka's follows its map's); the
    ISR arrays are shared between partitions with the same ISR (the response is only
    encoded; 100,000 of them when a broker rejoins)."""
    by_topic: dict[str, list] = {}
    isr_lists: dict[tuple, list] = {}
    for (topic, p), r in responses.items():
        if isinstance(r, State):
            isr = isr_lists.get(r.isr)
            if isr is None:
                isr = isr_lists[r.isr] = list(r.isr)
            part = AlterPartitionResponse.PartitionData(
                partition_index=p, error_code=0, leader_id=r.leader, leader_epoch=r.leader_epoch,
                isr=isr, leader_recovery_state=r.leader_recovery_state,
                partition_epoch=r.partition_epoch)
        else:
            part = AlterPartitionResponse.PartitionData(partition_index=p, error_code=int(r))
        by_topic.setdefault(topic, []).append(part)
    topics = []
    for topic, parts in by_topic.items():
        td = AlterPartitionResponse.TopicData(partitions=parts)
        if use_ids:
            td.topic_id = ctx.topic_ids.get(topic, ZERO_UUID)
        else:
            td.topic_name = topic
        topics.append(td)
    for t in unknown_topics:
        topics.append(AlterPartitionResponse.TopicData(
            topic_id=t.topic_id, partitions=[AlterPartitionResponse.PartitionData(
                partition_index=p.partition_index, error_code=int(ErrorCode.UNKNOWN_TOPIC_ID))
                for p in t.partitions]))
    return AlterPartitionResponse(error_code=0, topics=topics)
