"""GroupCoordinator: Kafka's classic group protocol and offset storage for the groups whose
``__consumer_offsets`` partition this broker leads.

Ownership: ``on_election(partition)`` (this broker became leader of
``__consumer_offsets-<partition>``) loads the partition (COORDINATOR_LOAD_IN_PROGRESS
meanwhile); ``on_resignation(partition)`` unloads its groups (waiters answer NOT_COORDINATOR).
A group on a partition this broker does not own -> NOT_COORDINATOR; before ``startup`` /
after ``shutdown`` -> COORDINATOR_NOT_AVAILABLE.

Membership (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) follows Kafka's GroupCoordinator:
KIP-394 member ids (MEMBER_ID_REQUIRED for v4+ joins without one), KIP-345 static members,
DelayedJoin / InitialDelayedJoin (``group.initial.rebalance.delay.ms``) in the Rebalance
purgatory, DelayedHeartbeat (session timeout) in the Heartbeat purgatory, new members get
``NEW_MEMBER_JOIN_TIMEOUT_MS`` (5 min) to rejoin. The group is written to
``__consumer_offsets`` when a generation forms with the leader's assignment, when it becomes
Empty, and when a static member is replaced; offsets on every commit; tombstones on
deletion and expiry (KIP-211: only Empty groups' offsets expire, after
``offsets.retention.minutes``).

Results reach the caller through callbacks (``JoinResult``, ``SyncResult``, error codes) so
the purgatory operations can answer parked requests; the handlers wrap them in futures.
Everything runs on the event loop thread; group writes are awaited in tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from broker.coordinator.delayed_heartbeat import DelayedHeartbeat
from broker.coordinator.delayed_join import DelayedJoin, InitialDelayedJoin
from broker.coordinator.group import (
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
    OffsetAndMetadata,
    SyncResult,
    new_member_id,
)
from broker.coordinator.group_store import GroupStore
from broker.coordinator.records import (
    group_metadata_record,
    group_tombstone,
    offset_commit_record,
    offset_tombstone,
)
from broker.purgatory import DelayedOperationPurgatory, GroupKey, MemberKey
from protocol.errors import ErrorCode

__all__ = ["GroupConfig", "GroupCoordinator", "JoinResult", "SyncResult"]

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupConfig:
    """The broker settings the coordinator uses (Kafka names; times in ms)."""

    def __init__(self, min_session_timeout_ms: int = 6000,
                 max_session_timeout_ms: int = 1800000, initial_rebalance_delay_ms: int = 3000,
                 max_size: int = 2**31 - 1, offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
                 offsets_retention_check_interval_ms: int = 600000,
                 offset_metadata_max_bytes: int = 4096, num_partitions: int = 50) -> None:
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.max_size = max_size
        self.offsets_retention_ms = offsets_retention_ms
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.num_partitions = num_partitions

    @classmethod
    def from_kafka_config(cls, config) -> GroupConfig:
        return cls(
            min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
            max_size=config.get("group.max.size"),
            offsets_retention_ms=config.get("offsets.retention.minutes") * 60 * 1000,
            offsets_retention_check_interval_ms=config.get("offsets.retention.check.interval.ms"),
            offset_metadata_max_bytes=config.get("offset.metadata.max.bytes"),
            num_partitions=config.get("offsets.topic.num.partitions"))


class GroupCoordinator:
    """See the module docstring. ``store`` is a GroupStore (or anything with its
    ``partition_for``/``append``/``load``), ``timer`` the purgatory Timer."""

    def __init__(self, broker_id: int, config: GroupConfig, store: GroupStore, timer,
                 time_ms: Callable[[], int] = _now_ms) -> None:
        self.broker_id = broker_id
        self.config = config
        self.store = store
        self.timer = timer
        self.time_ms = time_ms
        self.join_purgatory = DelayedOperationPurgatory("Rebalance", timer)
        self.heartbeat_purgatory = DelayedOperationPurgatory("Heartbeat", timer)
        self.groups: dict[str, GroupMetadata] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.epochs: dict[int, int] = {}
        self.active = False
        self.rebalances = 0
        self._tasks: set[asyncio.Task] = set()
        self._expiry_task: asyncio.Task | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def startup(self, run_expiry: bool = True) -> None:
        self.active = True
        if run_expiry:
            self._expiry_task = asyncio.get_running_loop().create_task(self._expiry_loop())

    async def shutdown(self) -> None:
        self.active = False
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry_task
        for t in list(self._tasks):
            t.cancel()
        self.join_purgatory.shutdown()
        self.heartbeat_purgatory.shutdown()
        self.groups.clear()
        self.owned.clear()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group coordinator task failed", exc_info=task.exception())

    async def wait_idle(self) -> None:
        """Wait for in-flight background writes/loads (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- partition ownership -------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return self.store.partition_for(group_id)

    def on_election(self, partition: int, epoch: int = 0) -> asyncio.Task | None:
        """This broker leads ``__consumer_offsets-<partition>``: load its groups."""
        if partition in self.owned and self.epochs.get(partition) == epoch:
            return None
        if partition in self.loading:
            self.epochs[partition] = epoch
            return None
        self.epochs[partition] = epoch
        self.loading.add(partition)
        return self._spawn(self._load(partition, epoch))

    async def _load(self, partition: int, epoch: int) -> None:
        start = time.monotonic()
        try:
            loaded = await self.store.load(
                partition, lambda: partition in self.loading and self.epochs.get(partition) == epoch)
        except Exception:
            self.loading.discard(partition)
            log.exception("loading __consumer_offsets-%d failed", partition)
            return
        if partition not in self.loading or self.epochs.get(partition) != epoch:
            return
        for group_id, group in loaded.items():
            if self.partition_for(group_id) != partition:
                continue
            group._now_ms = self.time_ms
            self.groups[group_id] = group
            for member in group.members.values():
                self._complete_and_schedule_heartbeat(group, member)
        self.loading.discard(partition)
        self.owned.add(partition)
        log.log(logging.INFO if loaded else logging.DEBUG,
                "loaded %d groups of __consumer_offsets-%d in %.1f ms", len(loaded),
                 partition, (time.monotonic() - start) * 1000)

    def on_resignation(self, partition: int) -> None:
        """No longer leader: drop the partition's groups; waiters answer NOT_COORDINATOR."""
        self.loading.discard(partition)
        self.epochs.pop(partition, None)
        was_owned = partition in self.owned
        self.owned.discard(partition)
        if not was_owned:
            return
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups.pop(group_id)
            self._fail_waiters(group, E.NOT_COORDINATOR)
            group.state = S.DEAD
            self.join_purgatory.check_and_complete(GroupKey(group_id))
            for mid in list(group.members):
                self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, mid))

    def _fail_waiters(self, group: GroupMetadata, error: ErrorCode) -> None:
        for m in list(group.members.values()):
            group.invoke_join_callback(m, JoinResult(int(error), m.member_id))
            group.invoke_sync_callback(m, SyncResult(int(error)))

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE, or why this broker cannot serve ``group_id`` (Kafka's validateGroupStatus)."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE
        p = self.partition_for(group_id)
        if p in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return E.NOT_COORDINATOR
        return E.NONE

    # --- JoinGroup ---------------------------------------------------------------------------
    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                          require_known_member_id: bool, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int,
                          protocol_type: str, protocols: list[tuple[str, bytes]],
                          callback: Callable[[JoinResult], None]) -> None:
        """Answers through ``callback`` (at once for errors, else when the rebalance
        completes). Errors: INVALID_GROUP_ID, COORDINATOR_*, NOT_COORDINATOR,
        INVALID_SESSION_TIMEOUT, UNKNOWN_MEMBER_ID, INCONSISTENT_GROUP_PROTOCOL,
        MEMBER_ID_REQUIRED, GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID."""
        def fail(error: ErrorCode, mid: str = member_id) -> None:
            callback(JoinResult(int(error), mid))

        if not group_id:
            return fail(E.INVALID_GROUP_ID)
        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return fail(err)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return fail(E.INVALID_SESSION_TIMEOUT)
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return fail(E.UNKNOWN_MEMBER_ID)
            group = GroupMetadata(group_id, S.EMPTY, self.time_ms)
            self.groups[group_id] = group
        if not self._accept_joining_member(group, member_id):
            group.remove_pending_member(member_id)
            return fail(E.GROUP_MAX_SIZE_REACHED)
        args = (client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                protocols, callback)
        if is_unknown:
            self._unknown_member_join(group, group_instance_id, require_known_member_id, *args)
        else:
            self._current_member_join(group, member_id, group_instance_id, *args)
        if group.is_state(S.PREPARING_REBALANCE):
            self.join_purgatory.check_and_complete(GroupKey(group_id))

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        """group.max.size: a known member may always rejoin."""
        max_size = self.config.max_size
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.state is S.PREPARING_REBALANCE:
            m = group.members.get(member_id)
            return (m is not None and m.is_awaiting_join) or \
                group.num_members_awaiting_join < max_size
        return member_id in group or group.size < max_size

    def _unknown_member_join(self, group, instance_id, require_known, client_id, client_host,
                             rebalance_timeout, session_timeout, protocol_type, protocols,
                             callback) -> None:
        if group.is_state(S.DEAD):
            return callback(JoinResult(int(E.COORDINATOR_NOT_AVAILABLE), UNKNOWN_MEMBER_ID))
        if not group.supports_protocols(protocol_type, [n for n, _ in protocols]):
            return callback(JoinResult(int(E.INCONSISTENT_GROUP_PROTOCOL), UNKNOWN_MEMBER_ID))
        member_id = new_member_id(client_id)
        if instance_id is not None:
            old = group.static_member_id(instance_id)
            if old is not None:
                return self._update_static_member(group, old, member_id, instance_id, protocols,
                                                  rebalance_timeout, session_timeout, callback)
        elif require_known:
            # KIP-394: hand out the id; the member must come back with it.
            group.add_pending_member(member_id)
            self._schedule_pending_expiration(group, member_id, session_timeout)
            return callback(JoinResult(int(E.MEMBER_ID_REQUIRED), member_id))
        self._add_member_and_rebalance(group, member_id, instance_id, client_id, client_host,
                                       rebalance_timeout, session_timeout, protocol_type,
                                       protocols, callback)

    def _current_member_join(self, group, member_id, instance_id, client_id, client_host,
                             rebalance_timeout, session_timeout, protocol_type, protocols,
                             callback) -> None:
        if group.is_state(S.DEAD):
            return callback(JoinResult(int(E.COORDINATOR_NOT_AVAILABLE), member_id))
        if not group.supports_protocols(protocol_type, [n for n, _ in protocols]):
            return callback(JoinResult(int(E.INCONSISTENT_GROUP_PROTOCOL), member_id))
        if group.is_pending_member(member_id):
            if instance_id is not None:  # static members never get pending ids
                return callback(JoinResult(int(E.UNKNOWN_MEMBER_ID), member_id))
            return self._add_member_and_rebalance(
                group, member_id, None, client_id, client_host, rebalance_timeout,
                session_timeout, protocol_type, protocols, callback)
        if group.is_static_member_fenced(member_id, instance_id):
            return callback(JoinResult(int(E.FENCED_INSTANCE_ID), member_id))
        if member_id not in group:
            return callback(JoinResult(int(E.UNKNOWN_MEMBER_ID), member_id))
        member = group.get(member_id)
        state = group.state
        if state is S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout,
                                              session_timeout, callback)
        elif state is S.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # the member missed the JoinGroup response: send it again
                callback(self._join_result(group, member, include_members=True))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout,
                                                  session_timeout, callback)
        elif state is S.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # the leader's rejoin (e.g. metadata change) or new protocols: rebalance
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout,
                                                  session_timeout, callback)
            else:
                callback(self._join_result(group, member, include_members=False))
        else:
            callback(JoinResult(int(E.UNKNOWN_MEMBER_ID), member_id))

    def _join_result(self, group: GroupMetadata, member: MemberMetadata,
                     include_members: bool, skip_assignment: bool = False) -> JoinResult:
        leader = group.is_leader(member.member_id)
        return JoinResult(
            int(E.NONE), member.member_id, group.generation_id, group.protocol_type,
            group.protocol_name, group.leader_id or "",
            group.current_member_metadata() if leader and include_members else [],
            skip_assignment)

    def _add_member_and_rebalance(self, group, member_id, instance_id, client_id, client_host,
                                  rebalance_timeout, session_timeout, protocol_type, protocols,
                                  callback) -> None:
        member = MemberMetadata(member_id, instance_id, client_id, client_host,
                                rebalance_timeout, session_timeout, protocol_type, protocols)
        member.is_new = True
        if instance_id is not None:
            group.add_static_member(instance_id, member_id)
        else:
            group.remove_pending_member(member_id)
        if group.is_state(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        self._complete_and_schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"new member {member_id} joined")

    def _update_member_and_rebalance(self, group, member, protocols, rebalance_timeout,
                                     session_timeout, callback) -> None:
        group.update_member(member, protocols, rebalance_timeout, session_timeout, callback)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _update_static_member(self, group, old_member_id, new_member_id, instance_id,
                              protocols, rebalance_timeout, session_timeout, callback) -> None:
        """KIP-345: a known instance rejoins with an unknown member id."""
        old_leader = group.leader_id
        old_member = group.get(old_member_id)
        old_protocols = list(old_member.supported_protocols)
        old_rebalance, old_session = old_member.rebalance_timeout_ms, old_member.session_timeout_ms
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self.heartbeat_purgatory.check_and_complete(MemberKey(group.group_id, old_member_id))
        self._complete_and_schedule_heartbeat(group, member)
        state = group.state
        if state is S.STABLE:
            selected = group.protocol_name
            group.update_member(member, protocols, rebalance_timeout, session_timeout, None)
            if group.select_protocol() != selected:
                group.update_member(member, protocols, rebalance_timeout, session_timeout,
                                    callback)
                return self._maybe_prepare_rebalance(group, "static member protocol changed")
            # same protocols: no rebalance; persist the new member id, then answer
            self._spawn(self._store_static_replacement(
                group, member, old_member_id, old_leader, old_protocols, old_rebalance,
                old_session, callback))
        elif state is S.COMPLETING_REBALANCE:
            group.update_member(member, protocols, rebalance_timeout, session_timeout, callback)
            self._maybe_prepare_rebalance(group, "static member rejoined after join phase")
        elif state is S.PREPARING_REBALANCE:
            group.update_member(member, protocols, rebalance_timeout, session_timeout, callback)
        else:
            callback(JoinResult(int(E.UNKNOWN_MEMBER_ID), new_member_id))

    async def _store_static_replacement(self, group, member, old_member_id, old_leader,
                                        old_protocols, old_rebalance, old_session, callback):
        generation = group.generation_id
        err = await self.store.append(self.partition_for(group.group_id),
                                      [group_metadata_record(group)])
        if err != E.NONE and group.generation_id == generation and \
                member.member_id in group and group.is_state(S.STABLE):
            # revert to the old member id
            group.replace_static_member(member.group_instance_id, member.member_id,
                                        old_member_id)
            group.update_member(member, old_protocols, old_rebalance, old_session, None)
            return callback(JoinResult(int(err), UNKNOWN_MEMBER_ID))
        if err != E.NONE:
            return callback(JoinResult(int(err), member.member_id))
        is_leader = group.is_leader(member.member_id)
        callback(JoinResult(
            int(E.NONE), member.member_id, group.generation_id, group.protocol_type,
            group.protocol_name,
            group.leader_id if is_leader else (old_leader or ""),
            group.current_member_metadata() if is_leader else [], skip_assignment=is_leader))

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_state(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        if group.is_state(S.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            op = InitialDelayedJoin(self, self.join_purgatory, group, delay, delay,
                                    max(group.rebalance_timeout_ms - delay, 0))
        else:
            op = DelayedJoin(self, group, group.rebalance_timeout_ms)
        group.transition_to(S.PREPARING_REBALANCE)
        self.rebalances += 1
        log.info("Preparing to rebalance group %s in state %s with old generation %d "
                 "(reason: %s)", group.group_id, group.state, group.generation_id, reason)
        self.join_purgatory.try_complete_else_watch(op, [GroupKey(group.group_id)])

    def on_complete_join(self, group: GroupMetadata) -> None:
        """DelayedJoin completed: drop dynamic members that did not rejoin, form the next
        generation and answer every waiting JoinGroup (the leader gets the members)."""
        if group.is_state(S.DEAD):
            return
        for m in group.not_yet_rejoined_members():
            if not m.is_static:
                group.remove(m.member_id)
                self.heartbeat_purgatory.check_and_complete(MemberKey(group.group_id, m.member_id))
        group.init_next_generation()
        if group.is_state(S.EMPTY):
            self._spawn(self._store_group(group, None))
            return
        log.info("Stabilized group %s generation %d with %d members", group.group_id,
                 group.generation_id, group.size)
        for member in list(group.members.values()):
            group.invoke_join_callback(member, self._join_result(group, member, True))
            self._complete_and_schedule_heartbeat(group, member)
            member.is_new = False

    async def _store_group(self, group: GroupMetadata, assignment: dict[str, bytes] | None
                           ) -> ErrorCode:
        return await self.store.append(self.partition_for(group.group_id),
                                       [group_metadata_record(group, assignment)])

    # --- heartbeats / expiration --------------------------------------------------------------
    def _complete_and_schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata,
                                         timeout_ms: int | None = None) -> None:
        key = MemberKey(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        op = DelayedHeartbeat(self, group, member.member_id, False,
                              member.session_timeout_ms if timeout_ms is None else timeout_ms)
        self.heartbeat_purgatory.try_complete_else_watch(op, [key])

    def _schedule_pending_expiration(self, group, member_id: str, timeout_ms: int) -> None:
        op = DelayedHeartbeat(self, group, member_id, True, timeout_ms)
        self.heartbeat_purgatory.try_complete_else_watch(
            op, [MemberKey(group.group_id, member_id)])

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        if is_pending:
            if group.is_pending_member(member_id):
                log.info("Pending member %s in group %s has been removed after session "
                         "timeout expiration.", member_id, group.group_id)
                group.remove_pending_member(member_id)
                if group.is_state(S.PREPARING_REBALANCE):
                    self.join_purgatory.check_and_complete(GroupKey(group.group_id))
            return
        member = group.members.get(member_id)
        if member is None or group.is_state(S.DEAD) or member.has_satisfied_heartbeat():
            return
        log.info("Member %s in group %s has failed, removing it from the group", member_id,
                 group.group_id)
        self._remove_member_and_update_group(group, member, "session timeout expired")

    def _remove_member_and_update_group(self, group, member, reason: str) -> None:
        group.invoke_join_callback(member, JoinResult(int(E.UNKNOWN_MEMBER_ID), member.member_id))
        group.remove(member.member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_state(S.PREPARING_REBALANCE):
            self.join_purgatory.check_and_complete(GroupKey(group.group_id))

    # --- SyncGroup -----------------------------------------------------------------------------
    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str,
                          protocol_type: str | None, protocol_name: str | None,
                          group_instance_id: str | None, assignments: dict[str, bytes],
                          callback: Callable[[SyncResult], None]) -> None:
        """Errors: COORDINATOR_*, NOT_COORDINATOR, REBALANCE_IN_PROGRESS (while loading or
        rebalancing), UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
        INCONSISTENT_GROUP_PROTOCOL (v5 type/name mismatch)."""
        def fail(error: ErrorCode) -> None:
            callback(SyncResult(int(error)))

        err = self.coordinator_error(group_id)
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            return fail(E.REBALANCE_IN_PROGRESS)
        if err != E.NONE:
            return fail(err)
        group = self.groups.get(group_id)
        if group is None:
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.is_state(S.DEAD):
            return fail(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return fail(E.FENCED_INSTANCE_ID)
        if member_id not in group:
            return fail(E.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return fail(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        member = group.get(member_id)
        if group.is_state(S.EMPTY):
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.is_state(S.PREPARING_REBALANCE):
            return fail(E.REBALANCE_IN_PROGRESS)
        if group.is_state(S.STABLE):
            self._complete_and_schedule_heartbeat(group, member)
            return callback(SyncResult(int(E.NONE), group.protocol_type, group.protocol_name,
                                       member.assignment))
        # CompletingRebalance
        if member.is_awaiting_sync:  # a duplicate: answer the earlier one
            group.invoke_sync_callback(member, SyncResult(int(E.REBALANCE_IN_PROGRESS)))
        member.sync_callback = callback
        self._complete_and_schedule_heartbeat(group, member)
        if group.is_leader(member_id):
            full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            self._spawn(self._store_assignment(group, group.generation_id, full))

    async def _store_assignment(self, group, generation: int, assignment: dict[str, bytes]):
        err = await self._store_group(group, assignment)
        if not (group.is_state(S.COMPLETING_REBALANCE) and group.generation_id == generation):
            return
        if err != E.NONE:
            self._reset_and_propagate_assignment_error(group, err)
            self._maybe_prepare_rebalance(group, f"failed to store the assignment: {err.name}")
            return
        for mid, m in group.members.items():
            m.assignment = assignment.get(mid, b"")
        group.transition_to(S.STABLE)
        self._propagate_assignment(group, E.NONE)

    def _reset_and_propagate_assignment_error(self, group, error: ErrorCode) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group, error: ErrorCode) -> None:
        for m in list(group.members.values()):
            if group.invoke_sync_callback(m, SyncResult(
                    int(error), group.protocol_type, group.protocol_name,
                    m.assignment if error == E.NONE else b"")):
                self._complete_and_schedule_heartbeat(group, m)

    # --- Heartbeat ---------------------------------------------------------------------------
    def handle_heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                         generation_id: int) -> ErrorCode:
        """NONE, REBALANCE_IN_PROGRESS (rejoin now), ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
        FENCED_INSTANCE_ID, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR. While loading: NONE
        (Kafka answers blindly; the member learns the truth after the load)."""
        err = self.coordinator_error(group_id)
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            return E.NONE
        if err != E.NONE:
            return err
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.is_state(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, group_instance_id):
            return E.FENCED_INSTANCE_ID
        if member_id not in group:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.is_state(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        self._complete_and_schedule_heartbeat(group, group.get(member_id))
        if group.is_state(S.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    # --- LeaveGroup --------------------------------------------------------------------------
    def handle_leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                           ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per leaving (member id, instance id)). A member named
        only by instance id (member id "") is found through the static mapping."""
        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return err, [err] * len(leaving)
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.is_state(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, [E.COORDINATOR_NOT_AVAILABLE] * len(leaving)
        out = []
        for member_id, instance_id in leaving:
            if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
                member_id = group.static_member_id(instance_id) or UNKNOWN_MEMBER_ID
                if member_id == UNKNOWN_MEMBER_ID:
                    out.append(E.UNKNOWN_MEMBER_ID)
                    continue
            if group.is_pending_member(member_id):
                group.remove_pending_member(member_id)
                self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, member_id))
                if group.is_state(S.PREPARING_REBALANCE):
                    self.join_purgatory.check_and_complete(GroupKey(group_id))
                out.append(E.NONE)
            elif group.is_static_member_fenced(member_id, instance_id):
                out.append(E.FENCED_INSTANCE_ID)
            elif member_id not in group:
                out.append(E.UNKNOWN_MEMBER_ID)
            else:
                member = group.get(member_id)
                member.is_leaving = True
                self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, member_id))
                self._remove_member_and_update_group(group, member, "member left the group")
                out.append(E.NONE)
        return E.NONE, out

    # --- offsets -------------------------------------------------------------------------------
    async def handle_commit_offsets(self, group_id: str, member_id: str,
                                    group_instance_id: str | None, generation_id: int,
                                    offsets: dict[tuple[str, int], OffsetAndMetadata]
                                    ) -> dict[tuple[str, int], ErrorCode]:
        """Per partition: NONE, OFFSET_METADATA_TOO_LARGE, or for all: COORDINATOR_*,
        NOT_COORDINATOR, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS,
        FENCED_INSTANCE_ID, INVALID_COMMIT_OFFSET_SIZE (append too large)."""
        def all_(error: ErrorCode) -> dict:
            return {tp: error for tp in offsets}

        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return all_(err)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return all_(E.ILLEGAL_GENERATION)
            # not using group management: a "simple" group that only stores offsets
            group = GroupMetadata(group_id, S.EMPTY, self.time_ms)
            self.groups[group_id] = group
        if group.is_state(S.DEAD):
            return all_(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return all_(E.FENCED_INSTANCE_ID)
        if not (generation_id < 0 and group.is_state(S.EMPTY)):
            if group.is_state(S.COMPLETING_REBALANCE):
                return all_(E.REBALANCE_IN_PROGRESS)
            if member_id not in group:
                return all_(E.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                return all_(E.ILLEGAL_GENERATION)
            self._complete_and_schedule_heartbeat(group, group.get(member_id))
        return await self._do_commit(group, offsets)

    async def _do_commit(self, group: GroupMetadata,
                         offsets: dict[tuple[str, int], OffsetAndMetadata]
                         ) -> dict[tuple[str, int], ErrorCode]:
        result: dict[tuple[str, int], ErrorCode] = {}
        valid: dict[tuple[str, int], OffsetAndMetadata] = {}
        limit = self.config.offset_metadata_max_bytes
        for tp, om in offsets.items():
            if om.metadata is not None and len(om.metadata.encode("utf-8")) > limit:
                result[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                valid[tp] = om
        if not valid:
            return result
        records = [offset_commit_record(group.group_id, tp[0], tp[1], om)
                   for tp, om in valid.items()]
        group.prepare_offset_commit(valid)
        try:
            err = await self.store.append(self.partition_for(group.group_id), records)
        except BaseException:
            group.finish_offset_commit(None, valid)
            raise
        if err in (E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE):
            err = E.INVALID_COMMIT_OFFSET_SIZE
        group.finish_offset_commit(valid if err == E.NONE else None, valid)
        for tp in valid:
            result[tp] = err
        return result

    def handle_fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                             require_stable: bool = False
                             ) -> tuple[ErrorCode, dict[tuple[str, int],
                                                        tuple[OffsetAndMetadata | None, ErrorCode]]]:
        """(group error, {tp: (committed or None, partition error)}); ``partitions`` None =
        every committed offset. A partition with a commit in flight answers
        UNSTABLE_OFFSET_COMMIT when ``require_stable`` (KIP-447)."""
        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return err, {}
        group = self.groups.get(group_id)
        if group is None or group.is_state(S.DEAD):
            return E.NONE, {tp: (None, E.NONE) for tp in partitions or ()}
        wanted = list(group.offsets) if partitions is None else partitions
        out = {}
        for tp in wanted:
            if require_stable and group.has_pending_offset_commit(tp):
                out[tp] = (None, E.UNSTABLE_OFFSET_COMMIT)
            else:
                out[tp] = (group.offsets.get(tp), E.NONE)
        return E.NONE, out

    async def handle_delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                                    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (non-consumer group with
        members), per partition GROUP_SUBSCRIBED_TO_TOPIC; tombstones are written."""
        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return err, {}
        group = self.groups.get(group_id)
        if group is None or group.is_state(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, {}
        if not group.is_state(S.EMPTY) and group.protocol_type != "consumer":
            return E.NON_EMPTY_GROUP, {}
        subscribed = set() if group.is_state(S.EMPTY) else (group.subscribed_topics() or set())
        result = {}
        deletable = []
        for tp in partitions:
            if tp[0] in subscribed:
                result[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                result[tp] = E.NONE
                if tp in group.offsets:
                    deletable.append(tp)
        if deletable:
            err = await self.store.append(self.partition_for(group_id),
                                          [offset_tombstone(group_id, *tp) for tp in deletable])
            if err != E.NONE:
                return err, {}
            for tp in deletable:
                group.offsets.pop(tp, None)
        return E.NONE, result

    # --- admin ---------------------------------------------------------------------------------
    def handle_describe_group(self, group_id: str) -> tuple[ErrorCode, GroupMetadata | None]:
        """(error, group); an unknown group is (NONE, None): described as Dead."""
        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return err, None
        group = self.groups.get(group_id)
        return E.NONE, group

    def handle_list_groups(self, states: Iterable[str] = ()) -> tuple[ErrorCode,
                                                                      list[GroupMetadata]]:
        """Groups of the partitions this broker owns (COORDINATOR_LOAD_IN_PROGRESS while any
        partition loads); ``states`` filters case-insensitively."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE, []
        wanted = {s.lower() for s in states}
        groups = [g for g in self.groups.values()
                  if not g.is_state(S.DEAD) and (not wanted or g.state.value.lower() in wanted)]
        return (E.COORDINATOR_LOAD_IN_PROGRESS if self.loading else E.NONE), groups

    async def handle_delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """Per group: NONE (Empty -> Dead, offsets and group tombstoned), NON_EMPTY_GROUP,
        GROUP_ID_NOT_FOUND (also for ""), or the coordinator error."""
        out: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            err = self.coordinator_error(group_id)
            if err != E.NONE:
                out[group_id] = err
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_state(S.DEAD):
                out[group_id] = E.GROUP_ID_NOT_FOUND
            elif not group.is_state(S.EMPTY):
                out[group_id] = E.NON_EMPTY_GROUP
            else:
                out[group_id] = await self._remove_group(group)
        return out

    async def _remove_group(self, group: GroupMetadata) -> ErrorCode:
        records = [offset_tombstone(group.group_id, *tp) for tp in group.offsets]
        records.append(group_tombstone(group.group_id))
        group.transition_to(S.DEAD)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        group.offsets.clear()
        return await self.store.append(self.partition_for(group.group_id), records)

    # --- offset expiration (KIP-211) -------------------------------------------------------------
    async def expire_offsets(self) -> int:
        """One retention pass (Kafka's cleanupGroupMetadata): tombstone expired offsets of
        Empty groups; an Empty group left without offsets, pending members or commits in
        flight becomes Dead and its group record is tombstoned. Returns the number of
        offsets expired."""
        now = self.time_ms()
        total = 0
        for group in list(self.groups.values()):
            expired = group.expired_offsets(now, self.config.offsets_retention_ms)
            removable = group.is_state(S.EMPTY) and not group.pending_members and \
                not group.pending_offset_commits and len(expired) == len(group.offsets)
            if not expired and not removable:
                continue
            records = [offset_tombstone(group.group_id, *tp) for tp in expired]
            for tp in expired:
                group.offsets.pop(tp, None)
            total += len(expired)
            if removable:
                group.transition_to(S.DEAD)
                self.groups.pop(group.group_id, None)
                records.append(group_tombstone(group.group_id))
            await self.store.append(self.partition_for(group.group_id), records)
        if total:
            log.info("Removed %d expired offsets", total)
        return total

    async def _expiry_loop(self) -> None:
        interval = max(self.config.offsets_retention_check_interval_ms, 1) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("offset expiration failed")

    # --- introspection for tools ---------------------------------------------------------------
    def group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def describe_members(self, group: GroupMetadata) -> list[dict[str, Any]]:
        stable = group.is_state(S.STABLE)
        return [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "metadata": m.metadata(group.protocol_name)
            if stable and group.protocol_name is not None else b"",
            "assignment": m.assignment if stable else b"",
        } for m in group.members.values()]
