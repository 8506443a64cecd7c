"""PartitionStateMachine (Kafka's ZkPartitionStateMachine): partition states and leader elections.

States and their valid previous states are in :mod:`controller.context`. Transitions:

- NonExistent -> New: the partition is known (assignment), nothing written.
- New -> Online: the initial state znode is created (fenced): leader = first live replica,
  ISR = live replicas, leader epoch 0; LeaderAndIsr(is_new) to the ISR, UpdateMetadata to all.
  No live replica: the partition stays New (logged).
- Offline/Online -> Online: a leader election with a strategy:
  ``OfflineStrategy(allow_unclean)`` (first live ISR replica in assignment order; unclean =
  first live replica with ISR = [it] and leader recovery state RECOVERING, when allowed by
  the election or by ``unclean.leader.election.enable`` of the topic/broker),
  ``REASSIGN`` (first live target replica in the ISR), ``PREFERRED`` (the first replica,
  when live and in the ISR) and ``CONTROLLED_SHUTDOWN`` (first live ISR replica not shutting
  down; the shutting-down brokers leave the ISR). The state is re-read from ZooKeeper, the
  new one (leader epoch + 1) written conditionally on the read version (BADVERSION: read and
  elect again), LeaderAndIsr to the live replicas, UpdateMetadata to all.
- New/Online/Offline -> Offline, Offline -> NonExistent: bookkeeping only.

A state znode written by a newer controller epoch aborts that partition's election. Results:
``{tp: new state | exception}`` (StateChangeFailedError when no leader is eligible).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from common.loop_slice import gather_staggered
from controller import elections
from controller.context import (
    VALID_PREVIOUS_PARTITION_STATES,
    ControllerContext,
    PartitionState,
    TopicPartition,
    target_replicas,
)
from controller.kafka_zk_client import BATCH, ControllerMovedError, KafkaZkClient
from controller.request_batch import ControllerBrokerRequestBatch
from controller.zk_data import LeaderIsrAndControllerEpoch

log = logging.getLogger("state.change.logger")
State = LeaderIsrAndControllerEpoch
RECOVERED, RECOVERING = 0, 1


class StateChangeFailedError(Exception):
    """A partition could not reach the target state (no eligible leader, stale state...)."""


@dataclass(frozen=True)
class OfflineStrategy:
    allow_unclean: bool = False

    def __str__(self) -> str:
        return f"OfflinePartitionLeaderElectionStrategy({str(self.allow_unclean).lower()})"


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


REASSIGN = _Named("ReassignPartitionLeaderElectionStrategy")
PREFERRED = _Named("PreferredReplicaPartitionLeaderElectionStrategy")
CONTROLLED_SHUTDOWN = _Named("ControlledShutdownPartitionLeaderElectionStrategy")


def new_leader_and_isr(state: State, leader: int, isr: Iterable[int], controller_epoch: int,
                       recovery: int | None = None) -> State:
    """The next state: leader epoch + 1; the partition epoch stays the version the write is
    conditional on (the written znode's new version replaces it afterwards)."""
    return State(leader, state.leader_epoch + 1, tuple(isr), controller_epoch,
                 state.partition_epoch,
                 state.leader_recovery_state if recovery is None else recovery)


def elected(results: dict[TopicPartition, State | Exception]) -> set[TopicPartition]:
    """The partitions of a ``handle_state_changes`` result that got their new state."""
    return {tp for tp, r in results.items() if not isinstance(r, BaseException)}


class PartitionStateMachine:
    """``unclean_enabled(topic) -> bool`` (awaitable) reads the topic's effective
    ``unclean.leader.election.enable`` for partitions left without a live ISR replica."""

    #: elections whose writes go in one task (one ZooKeeper multi)
    ELECTION_CHUNK = BATCH

    def __init__(self, controller_id: int, context: ControllerContext, zk: KafkaZkClient,
                 batch: ControllerBrokerRequestBatch,
                 unclean_enabled: Callable[[str], Awaitable[bool]]) -> None:
        self.controller_id = controller_id
        self.context = context
        self.zk = zk
        self.batch = batch
        self.unclean_enabled = unclean_enabled

    # ------------------------------------------------------------------ startup

    async def startup(self, partitions: Iterable[TopicPartition] | None = None
                      ) -> set[TopicPartition]:
        """Every partition (or each of ``partitions``) New / Online / Offline from the
        context, then leaders elected for the New and Offline ones not queued for deletion;
        returns the partitions elected (their LeaderAndIsr and UpdateMetadata are in the
        batch). A failover calls it for the partitions it read first, then for the rest."""
        ctx = self.context
        leadership, states = ctx.leadership, ctx.partition_states
        # without failed log dirs a leader is online iff its broker is live and not
        # shutting down (is_replica_online's rule, one set lookup instead of a call)
        live = None if ctx.replicas_on_offline_dirs else ctx.live_broker_ids
        is_online = ctx.is_replica_online
        new, online, offline = PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE
        if partitions is None:
            partitions = [(t, p) for t, ps in ctx.assignments.items() for p in ps]
        to_elect = []
        for tp in partitions:
            state = leadership.get(tp)
            if state is None:
                states[tp] = new
            elif state.leader in live if live is not None else is_online(state.leader, tp):
                states[tp] = online
                continue
            else:
                states[tp] = offline
            if not ctx.is_topic_queued_up_for_deletion(tp[0]):
                to_elect.append(tp)
        return elected(await self.handle_state_changes(to_elect, PartitionState.ONLINE,
                                                       OfflineStrategy(False)))

    async def trigger_online_partition_state_change(self, topic: str | None = None
                                                    ) -> dict[TopicPartition, State | Exception]:
        """Elect leaders for every New/Offline partition (of ``topic``) not being deleted."""
        ctx = self.context
        tps = [tp for tp in ctx.partitions_in_states({PartitionState.OFFLINE, PartitionState.NEW},
                                                     topic)
               if not ctx.is_topic_queued_up_for_deletion(tp[0])]
        return await self.handle_state_changes(tps, PartitionState.ONLINE, OfflineStrategy(False))

    # ------------------------------------------------------------------ transitions

    async def handle_state_changes(self, tps: list[TopicPartition], target: PartitionState,
                                   strategy=None) -> dict[TopicPartition, State | Exception]:
        if not tps:
            return {}
        self.batch.new_batch()
        try:
            results = await self._do_handle_state_changes(tps, target, strategy)
        except ControllerMovedError:
            self.batch.clear()
            log.error("Controller moved to another broker when moving some partitions to %s "
                      "state", target)
            raise
        except Exception as e:
            log.exception("Error while moving some partitions to %s state", target)
            results = {tp: e for tp in tps}
        self.batch.send_requests_to_brokers(self.context.epoch)
        return results

    async def _do_handle_state_changes(self, tps, target, strategy):
        ctx = self.context
        for tp in tps:
            ctx.partition_states.setdefault(tp, PartitionState.NON_EXISTENT)
        valid, invalid = ctx.check_valid_partition_state_change(tps, target)
        bad = ChangeLog(logging.ERROR, f"Controller {self.controller_id} epoch {ctx.epoch} "
                        f"failed to change partitions to {target}: they should be in one of "
                        + "/".join(sorted(str(s) for s in VALID_PREVIOUS_PARTITION_STATES[target])))
        for tp in invalid:
            bad.add(f"{tp[0]}-{tp[1]} in {ctx.partition_state(tp)}")
        bad.emit()
        if target == PartitionState.ONLINE:
            uninitialized = [tp for tp in valid if ctx.partition_state(tp) == PartitionState.NEW]
            to_elect = [tp for tp in valid if ctx.partition_state(tp) in
                        (PartitionState.OFFLINE, PartitionState.ONLINE)]
            results: dict[TopicPartition, State | Exception] = {}
            if uninitialized:
                for tp in await self._initialize_leader_and_isr(uninitialized):
                    ctx.partition_states[tp] = PartitionState.ONLINE
            if to_elect:
                if strategy is None:
                    raise ValueError("an election strategy is required to go Online")
                results = await self._elect_leaders(to_elect, strategy)
                changes = ChangeLog(logging.INFO, f"Changed partitions to {target} by {strategy}")
                for tp, r in results.items():
                    if not isinstance(r, Exception):
                        changes.add_lazy(_from_fmt, tp, ctx.partition_state(tp), r)
                        ctx.partition_states[tp] = PartitionState.ONLINE
                changes.emit()
            return results
        changes = ChangeLog(logging.INFO, f"Changed partitions to {target}")
        for tp in valid:
            if target == PartitionState.NEW:
                changes.add(f"{tp[0]}-{tp[1]} from {ctx.partition_state(tp)} with assigned "
                            f"replicas {','.join(map(str, ctx.partition_replica_assignment(tp)))}")
            ctx.partition_states[tp] = target
        changes.emit()
        return {}

    async def _initialize_leader_and_isr(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        ctx = self.context
        states: dict[TopicPartition, State] = {}
        dead = ChangeLog(logging.ERROR, f"Controller {self.controller_id} epoch {ctx.epoch} "
                         "encountered error during state change from New to Online, live brokers "
                         f"are [{','.join(map(str, sorted(ctx.live_broker_ids)))}]. No assigned "
                         "replica is alive")
        for tp in tps:
            replicas = ctx.partition_replica_assignment(tp)
            live = [r for r in replicas if ctx.is_replica_online(r, tp)]
            if not live:
                dead.add(f"{tp[0]}-{tp[1]} assigned replicas [{','.join(map(str, replicas))}]")
                continue
            states[tp] = State(live[0], 0, tuple(live), ctx.epoch, 0)
        dead.emit()
        if not states:
            return []
        outcome = await self.zk.create_partition_states(states, ctx.epoch_zk_version)
        done = []
        failed = ChangeLog(logging.ERROR, f"Controller {self.controller_id} epoch {ctx.epoch} "
                           "failed to change state from New to Online")
        changes = ChangeLog(logging.INFO, "Changed partitions from New to Online")
        for tp, err in outcome.items():
            if err is not None:
                failed.add(f"{tp[0]}-{tp[1]}: {err!r}")
                continue
            state = states[tp]
            ctx.leadership[tp] = state
            self.batch.add_leader_and_isr(state.isr, tp, state,
                                          ctx.partition_full_replica_assignment(tp), is_new=True)
            changes.add_lazy(_tp_fmt, tp, state)
            done.append(tp)
        failed.emit()
        changes.emit()
        return done

    async def _elect_leaders(self, tps: list[TopicPartition], strategy
                             ) -> dict[TopicPartition, State | Exception]:
        """Elections in chunks of one ZooKeeper multi, worked on together: a chunk's
        elections are worked out and its results taken in while ZooKeeper writes the
        others (33,000 elections when a broker of a 100,000-partition cluster dies)."""
        step = self.ELECTION_CHUNK
        if len(tps) <= step:
            return await self._elect_leaders_chunk(tps, strategy)
        parts = await gather_staggered((self._elect_leaders_chunk(tps[i:i + step], strategy)
                                        for i in range(0, len(tps), step)),
                                       return_exceptions=True)
        finished: dict[TopicPartition, State | Exception] = {}
        for part in parts:  # every chunk finished first: none adds to the batch any more
            if isinstance(part, BaseException):
                raise part
            finished.update(part)
        return finished

    async def _elect_leaders_chunk(self, tps: list[TopicPartition], strategy
                                   ) -> dict[TopicPartition, State | Exception]:
        remaining = list(tps)
        finished: dict[TopicPartition, State | Exception] = {}
        cached = True
        while remaining:
            done, remaining = await self._do_elect_leaders(remaining, strategy, cached)
            cached = False
            failed = ChangeLog(logging.ERROR, f"Controller {self.controller_id} epoch "
                               f"{self.context.epoch} failed to change state to OnlinePartition")
            for tp, r in done.items():
                if isinstance(r, Exception):
                    failed.add(f"{tp[0]}-{tp[1]} from {self.context.partition_state(tp)}: {r}")
            failed.emit()
            finished.update(done)
            if remaining:
                log.info("Retrying leader election with strategy %s for %d partitions",
                         strategy, len(remaining))
        return finished

    async def _do_elect_leaders(self, tps: list[TopicPartition], strategy, cached: bool = False):
        """One round: the states come from the controller's cache on the first round (every
        state write goes through this controller, and a stale one fails the conditional
        write), from ZooKeeper on retries (Kafka reads ZooKeeper every round)."""
        ctx = self.context
        finished: dict[TopicPartition, State | Exception] = {}
        current = {tp: ctx.leadership[tp] for tp in tps if tp in ctx.leadership} if cached \
            else {}
        missing = [tp for tp in tps if tp not in current]
        if missing:
            current.update(await self.zk.get_partition_states(missing))
        valid: list[tuple[TopicPartition, State]] = []
        for tp in tps:
            state = current.get(tp)
            if state is None:
                finished[tp] = StateChangeFailedError(
                    f"LeaderAndIsr information doesn't exist for partition {tp[0]}-{tp[1]} in "
                    f"{ctx.partition_state(tp)} state")
            elif state.controller_epoch > ctx.epoch:
                finished[tp] = StateChangeFailedError(
                    f"Aborted leader election for partition {tp[0]}-{tp[1]} since the LeaderAndIsr "
                    f"path was already written by another controller. This probably means that the "
                    f"current controller {self.controller_id} went through a soft failure and "
                    f"another controller was elected with epoch {state.controller_epoch}.")
            else:
                valid.append((tp, state))
        if not valid:
            return finished, []
        elected: dict[TopicPartition, tuple[State, list[int]]] = {}
        for tp, state in valid:
            outcome = await self._elect_one(tp, state, strategy)
            if outcome is None:
                finished[tp] = StateChangeFailedError(
                    f"Failed to elect leader for partition {tp[0]}-{tp[1]} under strategy "
                    f"{strategy}")
            else:
                elected[tp] = outcome
        result = await self.zk.update_leader_and_isr({tp: s for tp, (s, _) in elected.items()},
                                                     ctx.epoch_zk_version)
        for tp, r in result.finished.items():
            if not isinstance(r, Exception):
                ctx.leadership[tp] = r
                self.batch.add_leader_and_isr(elected[tp][1], tp, r,
                                              ctx.partition_full_replica_assignment(tp),
                                              is_new=False)
            finished[tp] = r
        self.batch.maybe_flush(ctx.epoch)
        return finished, result.retry

    async def _elect_one(self, tp: TopicPartition, state: State, strategy
                         ) -> tuple[State, list[int]] | None:
        """Kafka's Election.leaderFor*: ``(new state, recipients)`` or None."""
        ctx = self.context
        epoch = ctx.epoch
        assignment = ctx.partition_replica_assignment(tp)
        if isinstance(strategy, OfflineStrategy):
            live = [r for r in assignment if ctx.is_replica_online(r, tp)]
            live_isr = [r for r in state.isr if ctx.is_replica_online(r, tp)]
            unclean = strategy.allow_unclean
            if not live_isr and not unclean:
                unclean = await self.unclean_enabled(tp[0])
            leader = elections.offline_partition_leader(assignment, state.isr, set(live), unclean)
            if leader is None:
                return None
            if leader in state.isr:
                return new_leader_and_isr(state, leader, live_isr, epoch), live
            log.warning("Unclean leader election: broker %d becomes leader of %s-%d outside "
                        "the ISR %s (data may be lost)", leader, *tp, list(state.isr))
            return new_leader_and_isr(state, leader, [leader], epoch, RECOVERING), live
        if strategy is REASSIGN:
            targets = target_replicas(ctx.partition_full_replica_assignment(tp))
            live = {r for r in targets if ctx.is_replica_online(r, tp)}
            leader = elections.reassign_partition_leader(targets, state.isr, live)
            if leader is None:
                return None
            return new_leader_and_isr(state, leader, state.isr, epoch), list(targets)
        if strategy is PREFERRED:
            live = {r for r in assignment if ctx.is_replica_online(r, tp)}
            leader = elections.preferred_replica_partition_leader(assignment, state.isr, live)
            if leader is None:
                return None
            return new_leader_and_isr(state, leader, state.isr, epoch), list(assignment)
        if strategy is CONTROLLED_SHUTDOWN:
            shutting = ctx.shutting_down_broker_ids
            live = [r for r in assignment if ctx.is_replica_online(r, tp, True)]
            leader = elections.controlled_shutdown_partition_leader(assignment, state.isr,
                                                                    set(live), shutting)
            if leader is None:
                return None
            isr = [r for r in state.isr if r not in shutting]
            return new_leader_and_isr(state, leader, isr, epoch), live
        raise ValueError(f"unknown election strategy {strategy!r}")


class ChangeLog:
    """State changes of one batch, logged as one INFO line (count and the first few) with
    every partition at DEBUG: Kafka logs each partition, which costs seconds in Python for
    thousands of partitions."""

    SHOWN = 5

    def __init__(self, level: int, head: str) -> None:
        self.level, self.head = level, head
        self.items: list[str] = []
        self.n = 0
        self._debug = log.isEnabledFor(logging.DEBUG)

    def add(self, text: str) -> None:
        self.n += 1
        if len(self.items) < self.SHOWN:
            self.items.append(text)
        if self._debug:
            log.debug("%s: %s", self.head, text)

    def add_lazy(self, fn, *args) -> None:
        """``add(fn(*args))``, formatting only when the text is shown (100,000 partitions'
        state changes are counted, not all formatted)."""
        if self._debug or len(self.items) < self.SHOWN:
            self.add(fn(*args))
        else:
            self.n += 1

    def add_all(self, fn, args: Iterable[tuple]) -> None:
        """``add_lazy(fn, *a)`` for each ``a`` of ``args`` (a sized collection)."""
        if self._debug:
            for a in args:
                self.add(fn(*a))
            return
        shown = self.SHOWN - len(self.items)
        if shown > 0:
            for a in itertools.islice(args, shown):
                self.items.append(fn(*a))
        self.n += len(args)

    def emit(self) -> None:
        n = self.n
        if not n or not log.isEnabledFor(self.level):
            return
        more = f" (and {n - self.SHOWN} more)" if n > self.SHOWN else ""
        log.log(self.level, "%s (%d partition%s): %s%s", self.head, n, "" if n == 1 else "s",
                "; ".join(self.items[:self.SHOWN]), more)


def _tp_fmt(tp: TopicPartition, s: State) -> str:
    return f"{tp[0]}-{tp[1]} {_fmt(s)}"


def _from_fmt(tp: TopicPartition, previous, s: State) -> str:
    return f"{tp[0]}-{tp[1]} from {previous} {_fmt(s)}"


def _fmt(s: State) -> str:
    return (f"(Leader:{s.leader},ISR:{','.join(map(str, s.isr))},LeaderRecoveryState:"
            f"{'RECOVERING' if s.leader_recovery_state else 'RECOVERED'},LeaderEpoch:"
            f"{s.leader_epoch},ZkVersion:{s.partition_epoch},ControllerEpoch:"
            f"{s.controller_epoch})")
