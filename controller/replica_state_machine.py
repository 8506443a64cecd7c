"""ReplicaStateMachine (Kafka's ZkReplicaStateMachine): the state of each replica.

States and their valid previous states are in :mod:`controller.context`. Transitions:

- -> NewReplica: LeaderAndIsr(is_new) to the replica when the partition has a leader (a
  replica asked to become leader cannot be New).
- -> OnlineReplica: from New, the replica joins the assignment if missing; otherwise a
  LeaderAndIsr with the current state to the replica.
- -> OfflineReplica: StopReplica(delete=false) to the replica; the replica leaves the ISR in
  ZooKeeper (fenced conditional writes; if it led, leader becomes -1 = NO_LEADER; an ISR of
  one is kept) and LeaderAndIsr goes to the other replicas (not for topics being deleted).
- -> ReplicaDeletionStarted: StopReplica(delete=true).
- -> ReplicaDeletionSuccessful / ReplicaDeletionIneligible: bookkeeping.
- -> NonExistentReplica: the replica leaves the in-memory assignment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator

from common.loop_slice import LoopSlice, gather_staggered
from controller.context import (
    EMPTY_ASSIGNMENT,
    VALID_PREVIOUS_REPLICA_STATES,
    ControllerContext,
    PartitionReplica,
    ReplicaState,
    TopicPartition,
    remove_replica,
)
from controller.kafka_zk_client import BATCH, ControllerMovedError, KafkaZkClient
from controller.partition_state_machine import (
    ChangeLog,
    StateChangeFailedError,
    _tp_fmt,
    new_leader_and_isr,
)
from controller.request_batch import ControllerBrokerRequestBatch
from controller.zk_data import NO_LEADER, LeaderIsrAndControllerEpoch

log = logging.getLogger("state.change.logger")
State = LeaderIsrAndControllerEpoch


class ReplicaStateMachine:
    #: partitions whose ISR shrinks go in one task (one ZooKeeper multi)
    ISR_CHUNK = BATCH

    def __init__(self, controller_id: int, context: ControllerContext, zk: KafkaZkClient,
                 batch: ControllerBrokerRequestBatch) -> None:
        self.controller_id = controller_id
        self.context = context
        self.zk = zk
        self.batch = batch
        #: partition -> the state a LeaderAndIsr just carried to its live replicas (see
        #: `already_sent`): not sent again when a transition leaves it unchanged
        self._sent: dict[TopicPartition, State] = {}

    @contextlib.contextmanager
    def already_sent(self, tps: Iterable[TopicPartition]) -> Iterator[None]:
        """Within the block, a partition of ``tps`` whose state stays what it is now gets
        no LeaderAndIsr / UpdateMetadata from the Online and Offline transitions: an
        election just sent that state to its live replicas and to every broker (the
        failover's and a broker failure's second wave, 33,000 partitions at 100,000 RF 3
        that a broker would otherwise apply twice)."""
        leadership = self.context.leadership
        self._sent = {tp: leadership[tp] for tp in tps if tp in leadership}
        try:
            yield
        finally:
            self._sent = {}

    def _unchanged_since_sent(self, tp: TopicPartition, state: State) -> bool:
        sent = self._sent.get(tp)
        return sent is not None and (sent is state or (
            sent.leader == state.leader and sent.leader_epoch == state.leader_epoch
            and sent.partition_epoch == state.partition_epoch and sent.isr == state.isr))

    async def startup(self) -> None:
        """Every replica Online (live broker) or ReplicaDeletionIneligible, then moved to
        OnlineReplica / OfflineReplica, in one pass over the assignments (300,000 replicas
        at 100,000 partitions RF 3). The Online step is the generic transition
        specialised: each replica was just set Online (a valid previous state, not New), so
        it gets a LeaderAndIsr with its partition's current state when there is one."""
        ctx = self.context
        states = ctx.replica_states
        is_online = ctx.is_replica_online
        leadership = ctx.leadership
        # without failed log dirs a replica is online iff its broker is live and not
        # shutting down (is_replica_online's rule, one set lookup instead of a call)
        live = None if ctx.replicas_on_offline_dirs else ctx.live_broker_ids
        online_state, ineligible = ReplicaState.ONLINE, ReplicaState.DELETION_INELIGIBLE
        sent = self._sent  # same state objects: the election just sent them
        to_send: dict[int, dict[TopicPartition, tuple]] = {}  # broker -> LeaderAndIsr entries
        offline: dict[int, list[PartitionReplica]] = {}
        slicer = LoopSlice()  # 300,000 replicas at 100,000 partitions: the loop gives way
        for t, ps in list(ctx.assignments.items()):
            await slicer.tick()
            for p, a in ps.items():
                tp = (t, p)
                state = leadership.get(tp)
                entry = (state, a)
                for r in a.replicas:
                    if r in live if live is not None else is_online(r, tp):
                        states[(tp, r)] = online_state
                        if state is not None and (not sent or tp not in sent):
                            got = to_send.get(r)
                            if got is None:
                                got = to_send[r] = {}
                            got[tp] = entry
                    else:
                        key = (tp, r)
                        states[key] = ineligible
                        got = offline.get(r)
                        if got is None:
                            got = offline[r] = []
                        got.append(key)
        self.batch.new_batch()
        for broker, entries in to_send.items():
            self.batch.add_leader_and_isr_many(broker, entries)
        self.batch.send_requests_to_brokers(ctx.epoch)
        await self._handle_grouped(offline, ReplicaState.OFFLINE)

    async def handle_state_changes(self, replicas: list[PartitionReplica],
                                   target: ReplicaState) -> None:
        by_broker: dict[int, list[PartitionReplica]] = defaultdict(list)
        for r in replicas:
            by_broker[r[1]].append(r)
        await self._handle_grouped(by_broker, target)

    async def _handle_grouped(self, by_broker: dict[int, list[PartitionReplica]],
                              target: ReplicaState) -> None:
        if not by_broker:
            return
        self.batch.new_batch()
        try:
            for broker, rs in by_broker.items():
                await self._do_handle_state_changes(broker, rs, target)
        except ControllerMovedError:
            self.batch.clear()
            log.error("Controller moved to another broker when moving some replicas to %s "
                      "state", target)
            raise
        except Exception:
            log.exception("Error while moving some replicas to %s state", target)
        self.batch.send_requests_to_brokers(self.context.epoch)

    async def _do_handle_state_changes(self, replica_id: int, replicas: list[PartitionReplica],
                                       target: ReplicaState) -> None:
        ctx = self.context
        states = ctx.replica_states
        allowed = VALID_PREVIOUS_REPLICA_STATES[target]
        valid: list[PartitionReplica] = []
        invalid: list[PartitionReplica] = []
        was_new: set[PartitionReplica] = set()  # NewReplica before (going Online)
        new_state = ReplicaState.NEW if target == ReplicaState.ONLINE else None
        for r in replicas:
            st = states.get(r)
            if st is None:
                states[r] = st = ReplicaState.NON_EXISTENT
            if st in allowed:
                valid.append(r)
                if st is new_state:
                    was_new.add(r)
            else:
                invalid.append(r)
        bad = ChangeLog(logging.ERROR, f"Controller {self.controller_id} epoch {ctx.epoch} "
                        f"initiated state change of replica {replica_id} to {target} failed: it "
                        "should be in one of " + "/".join(
                            sorted(str(s) for s in VALID_PREVIOUS_REPLICA_STATES[target])))
        for r in invalid:
            bad.add(f"{r[0][0]}-{r[0][1]} in {ctx.replica_state(r)}")
        bad.emit()
        if target == ReplicaState.NEW:
            for r in valid:
                tp = r[0]
                state = ctx.leadership.get(tp)
                if state is not None:
                    if state.leader == replica_id:
                        log.error("Replica %d for partition %s-%d cannot be moved to NewReplica "
                                  "state as it is being requested to become leader",
                                  replica_id, *tp)
                        continue
                    self.batch.add_leader_and_isr([replica_id], tp, state,
                                                  ctx.partition_full_replica_assignment(tp),
                                                  is_new=True)
                ctx.replica_states[r] = ReplicaState.NEW
        elif target == ReplicaState.ONLINE:
            leadership, assignments = ctx.leadership, ctx.assignments
            entries: dict[TopicPartition, tuple] = {}
            for r in valid:
                tp = r[0]
                if r in was_new:
                    a = ctx.partition_full_replica_assignment(tp)
                    if replica_id not in a.replicas:
                        log.error("Adding replica (%d) that is not part of the assignment %s",
                                  replica_id, a)
                        ctx.update_partition_full_replica_assignment(
                            tp, a._replace(replicas=a.replicas + (replica_id,)))
                else:
                    state = leadership.get(tp)
                    if state is not None:
                        entries[tp] = (state, assignments.get(tp[0], {}).get(
                            tp[1], EMPTY_ASSIGNMENT))
            self.batch.add_leader_and_isr_many(replica_id, entries)
            states.update(dict.fromkeys(valid, ReplicaState.ONLINE))
        elif target == ReplicaState.OFFLINE:
            leadership = ctx.leadership
            self.batch.add_stop_replica_many(replica_id, (r[0] for r in valid), False)
            with_leadership = [r[0] for r in valid if r[0] in leadership]
            without = [r for r in valid if r[0] not in leadership]
            # in chunks of one ZooKeeper multi, all at once: a chunk's ISR shrinks are
            # worked out and its results taken in while ZooKeeper writes the others
            parts = await gather_staggered((
                self._remove_from_isr_and_tell_others(replica_id,
                                                      with_leadership[i:i + self.ISR_CHUNK])
                for i in range(0, len(with_leadership), self.ISR_CHUNK)), return_exceptions=True)
            for part in parts:  # every chunk finished: none adds to the batch any more
                if isinstance(part, BaseException):
                    raise part
            changes = ChangeLog(logging.INFO, f"Partition states changed after removing replica "
                                f"{replica_id} from the ISR as part of transition to "
                                "OfflineReplica")
            for part in parts:
                changes.add_all(_tp_fmt, part.items())
            changes.emit()
            for r in without:
                self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [r[0]])
                ctx.replica_states[r] = ReplicaState.OFFLINE
        elif target == ReplicaState.DELETION_STARTED:
            for r in valid:
                ctx.replica_states[r] = ReplicaState.DELETION_STARTED
                self.batch.add_stop_replica([replica_id], r[0], delete_partition=True)
        elif target in (ReplicaState.DELETION_INELIGIBLE, ReplicaState.DELETION_SUCCESSFUL):
            for r in valid:
                ctx.replica_states[r] = target
        elif target == ReplicaState.NON_EXISTENT:
            for r in valid:
                tp = r[0]
                ctx.update_partition_full_replica_assignment(
                    tp, remove_replica(ctx.partition_full_replica_assignment(tp), replica_id))
                ctx.replica_states.pop(r, None)

    async def _remove_from_isr_and_tell_others(self, replica_id: int,
                                               tps: list[TopicPartition]
                                               ) -> dict[TopicPartition, State]:
        """``replica_id`` out of the ISRs of ``tps``; each changed partition's new state
        goes to its other replicas (not for topics being deleted) and the replica is
        Offline. Returns the new states.

        A partition whose ISR did not hold the replica keeps its state: Kafka sends it to
        the other replicas again all the same, and they ignore a LeaderAndIsr of their
        current leader and partition epochs. Here it gets only the UpdateMetadata (which
        lists the replica offline): a controlled shutdown takes the broker out of every
        ISR first, so its exit would resend 67,000 unchanged states at 100,000 partitions
        RF 3, while the broker restarts (issue 22)."""
        ctx = self.context
        unchanged: set[TopicPartition] = set()
        updated = await self._remove_replicas_from_isr(replica_id, tps, unchanged)
        assignments, deleting = ctx.assignments, ctx.topics_to_be_deleted
        to_others: dict[int, dict[TopicPartition, tuple]] = {}
        sent = self._sent
        metadata_only = []
        for tp, state in updated.items():
            if tp[0] in deleting or (sent and self._unchanged_since_sent(tp, state)):
                continue
            if tp in unchanged:
                metadata_only.append(tp)
            else:
                a = assignments.get(tp[0], {}).get(tp[1], EMPTY_ASSIGNMENT)
                entry = (state, a)
                for b in a.replicas:
                    if b != replica_id:
                        got = to_others.get(b)
                        if got is None:
                            got = to_others[b] = {}
                        got[tp] = entry
        for b, entries in to_others.items():
            self.batch.add_leader_and_isr_many(b, entries)
        if metadata_only:
            self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, metadata_only)
        ctx.replica_states.update(dict.fromkeys(((tp, replica_id) for tp in updated),
                                                ReplicaState.OFFLINE))
        return updated

    async def _remove_replicas_from_isr(self, replica_id: int, tps: list[TopicPartition],
                                        unchanged: set[TopicPartition]
                                        ) -> dict[TopicPartition, State]:
        results: dict[TopicPartition, State] = {}
        remaining = tps
        cached = True
        while remaining:
            done, remaining = await self._do_remove_replicas_from_isr(replica_id, remaining,
                                                                      unchanged, cached)
            cached = False
            failed = ChangeLog(logging.ERROR, f"Controller {self.controller_id} epoch "
                               f"{self.context.epoch} initiated state change of replica "
                               f"{replica_id} to OfflineReplica failed")
            for tp, r in done.items():
                if isinstance(r, Exception):
                    failed.add(f"{tp[0]}-{tp[1]}: {r}")
                else:
                    results[tp] = r
            failed.emit()
        return results

    async def _do_remove_replicas_from_isr(self, replica_id: int, tps: list[TopicPartition],
                                           unchanged: set[TopicPartition],
                                           cached: bool = False):
        """First round from the controller's cache, retries from ZooKeeper (see
        PartitionStateMachine._do_elect_leaders); a partition whose ISR lacks the replica
        is added to ``unchanged`` (its state is not written)."""
        ctx = self.context
        current = {tp: ctx.leadership[tp] for tp in tps if tp in ctx.leadership} if cached \
            else {}
        missing = [tp for tp in tps if tp not in current]
        if missing:
            current.update(await self.zk.get_partition_states(missing))
        out: dict[TopicPartition, State | Exception] = {}
        adjusted: dict[TopicPartition, State] = {}
        for tp in tps:
            state = current.get(tp)
            if state is None:
                if not ctx.is_topic_queued_up_for_deletion(tp[0]):
                    out[tp] = StateChangeFailedError(
                        f"Failed to change state of replica {replica_id} for partition "
                        f"{tp[0]}-{tp[1]} since the leader and isr path in zookeeper is empty")
                continue
            if state.controller_epoch > ctx.epoch:
                out[tp] = StateChangeFailedError(
                    "Leader and isr path written by another controller. This probably means the "
                    f"current controller with epoch {ctx.epoch} went through a soft failure and "
                    f"another controller was elected with epoch {state.controller_epoch}. "
                    "Aborting state change by this controller")
                continue
            if replica_id not in state.isr:
                fresh = State(state.leader, state.leader_epoch, state.isr, ctx.epoch,
                              state.partition_epoch, state.leader_recovery_state)
                ctx.leadership[tp] = fresh
                out[tp] = fresh
                unchanged.add(tp)
                continue
            leader = NO_LEADER if state.leader == replica_id else state.leader
            isr = state.isr if len(state.isr) == 1 else tuple(r for r in state.isr
                                                              if r != replica_id)
            adjusted[tp] = new_leader_and_isr(state, leader, isr, ctx.epoch)
        result = await self.zk.update_leader_and_isr(adjusted, ctx.epoch_zk_version)
        for tp, r in result.finished.items():
            if not isinstance(r, Exception):
                ctx.leadership[tp] = r
            out[tp] = r
        return out, result.retry
