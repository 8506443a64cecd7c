"""GroupMembership: the classic membership protocol of the GroupCoordinator (Kafka's
GroupCoordinator join/sync/heartbeat/leave paths), a mixin of ``GroupCoordinator``.

It uses the coordinator's ``config`` (GroupConfig), ``groups``, ``store``, ``time_ms``,
``join_purgatory`` (DelayedJoin / InitialDelayedJoin, key GroupKey), ``sync_purgatory``
(DelayedSync, key GroupKey), ``heartbeat_purgatory`` (DelayedHeartbeat, key MemberKey), ``coordinator_error(group_id)`` and ``_spawn(coro)``.

- JoinGroup: KIP-394 member ids (MEMBER_ID_REQUIRED with the generated id for v4+ joins
  without one; the pending id expires after the session timeout), KIP-345 static members
  (a known ``group.instance.id`` joining with an unknown member id replaces the old member
  without a rebalance when its protocols keep the group's protocol; the old id is then
  FENCED_INSTANCE_ID), protocol selection by votes, ``group.max.size``
  (GROUP_MAX_SIZE_REACHED), session timeout bounds (INVALID_SESSION_TIMEOUT).
- Rebalance: an Empty group waits ``group.initial.rebalance.delay.ms`` (InitialDelayedJoin),
  others at most the rebalance timeout (DelayedJoin) for every member to rejoin; members that
  did not are dropped (dynamic ones) and the next generation forms; new members get
  NEW_MEMBER_JOIN_TIMEOUT_MS (5 min) to heartbeat after their first join.
- SyncGroup: the leader's assignment is written to ``__consumer_offsets`` and then handed to
  every member (Stable); a failed write answers its error and rebalances. Every member of a
  new generation must send SyncGroup within the rebalance timeout (DelayedSync, Kafka 3.0+):
  the ones that did not are removed and the group rebalances.
- Heartbeat / LeaveGroup: see the method docstrings for the error codes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator.group.delayed_heartbeat import DelayedHeartbeat
from coordinator.group.delayed_join import DelayedJoin, InitialDelayedJoin
from coordinator.group.delayed_sync import DelayedSync
from coordinator.group.group import (
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
    SyncResult,
    new_member_id,
)
from coordinator.group.records import group_metadata_record
from coordinator.keys import GroupKey, MemberKey
from protocol.errors import ErrorCode

__all__ = ["GroupMembership", "NEW_MEMBER_JOIN_TIMEOUT_MS", "UNKNOWN_MEMBER_ID"]

log = logging.getLogger("coordinator.group.group_coordinator")

E = ErrorCode
S = GroupState
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
UNKNOWN_MEMBER_ID = ""


class GroupMembership:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance (see the module
    docstring); mixed into GroupCoordinator."""
    # --- JoinGroup ---------------------------------------------------------------------------
    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                          require_known_member_id: bool, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int,
                          protocol_type: str, protocols: list[tuple[str, bytes]],
                          callback: Callable[[JoinResult], None],
                          support_skip_assignment: bool = True) -> None:
        """Answers through ``callback`` (at once for errors, else when the rebalance
        completes). ``support_skip_assignment``: the request is JoinGroup v9+ (KIP-814; a
        static leader rejoining a Stable group is told it leads but must skip the
        assignment; older versions get the previous leader id and no members). Errors: INVALID_GROUP_ID, COORDINATOR_*, NOT_COORDINATOR,
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
        if self.share is not None and group_id in self.share.groups:
            return fail(E.GROUP_ID_NOT_FOUND)  # a share group (Kafka: not a classic group)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:  # a classic member of a KIP-848 group (migration)
            return self._spawn_callback(self.consumer.migration.classic_join(
                consumer_group, member_id, group_instance_id, require_known_member_id,
                client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                protocol_type, protocols), callback, JoinResult(int(E.UNKNOWN_SERVER_ERROR),
                                                                member_id))
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return fail(E.UNKNOWN_MEMBER_ID)
            group = GroupMetadata(group_id, S.EMPTY, self.time_ms)
            self.groups[group_id] = group
        args = (client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                protocols, callback)
        if not self._accept_joining_member(group, member_id):
            # Kafka sheds the refused member, so a rebalance does not wait for it
            group.remove_pending_member(member_id)
            if group.remove(member_id) is not None:
                log.info("Member %s of group %s removed: group.max.size %d reached", member_id,
                         group_id, cfg.max_size)
                self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, member_id))
            callback(JoinResult(int(E.GROUP_MAX_SIZE_REACHED), UNKNOWN_MEMBER_ID))
        elif is_unknown:
            self._unknown_member_join(group, group_instance_id, require_known_member_id,
                                      support_skip_assignment, *args)
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

    def _unknown_member_join(self, group, instance_id, require_known, support_skip_assignment,
                             client_id, client_host, rebalance_timeout, session_timeout,
                             protocol_type, protocols, callback) -> None:
        if group.is_state(S.DEAD):
            return callback(JoinResult(int(E.COORDINATOR_NOT_AVAILABLE), UNKNOWN_MEMBER_ID))
        if not group.supports_protocols(protocol_type, [n for n, _ in protocols]):
            return callback(JoinResult(int(E.INCONSISTENT_GROUP_PROTOCOL), UNKNOWN_MEMBER_ID))
        member_id = new_member_id(client_id)
        if instance_id is not None:
            old = group.static_member_id(instance_id)
            if old is not None:
                return self._update_static_member(group, old, member_id, instance_id, protocols,
                                                  rebalance_timeout, session_timeout, callback,
                                                  support_skip_assignment)
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
        err = group.member_error(member_id, instance_id)
        if err != E.NONE:
            return callback(JoinResult(int(err), member_id))
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
                              protocols, rebalance_timeout, session_timeout, callback,
                              support_skip_assignment: bool = True) -> None:
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
                old_session, callback, support_skip_assignment))
        elif state is S.COMPLETING_REBALANCE:
            group.update_member(member, protocols, rebalance_timeout, session_timeout, callback)
            self._maybe_prepare_rebalance(group, "static member rejoined after join phase")
        elif state is S.PREPARING_REBALANCE:
            group.update_member(member, protocols, rebalance_timeout, session_timeout, callback)
        else:
            callback(JoinResult(int(E.UNKNOWN_MEMBER_ID), new_member_id))

    async def _store_static_replacement(self, group, member, old_member_id, old_leader,
                                        old_protocols, old_rebalance, old_session, callback,
                                        support_skip_assignment: bool = True):
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
        is_leader = group.is_leader(member.member_id) and support_skip_assignment
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
        self._remove_sync_expiration(group)
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
        generation and answer every waiting JoinGroup (the leader, a member that rejoined,
        gets the members). If members remain but none rejoined (static members only), the
        join phase waits another rebalance timeout instead (Kafka's onCompleteJoin)."""
        if group.is_state(S.DEAD):
            return
        for m in group.not_yet_rejoined_members():
            if not m.is_static:
                group.remove(m.member_id)
                self.heartbeat_purgatory.check_and_complete(MemberKey(group.group_id, m.member_id))
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.error("Group %s could not complete rebalance because no members rejoined",
                      group.group_id)
            self.join_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms), [GroupKey(group.group_id)])
            return
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
            group.add_pending_sync_member(member.member_id)
        self.sync_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms),
            [GroupKey(group.group_id)])

    # --- pending sync (DelayedSync) -------------------------------------------------------------
    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        self.sync_purgatory.check_and_complete(GroupKey(group.group_id))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.clear_pending_sync_members()
        self.sync_purgatory.check_and_complete(GroupKey(group.group_id))

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        """DelayedSync timed out: remove the members of ``generation_id`` that never sent
        SyncGroup and rebalance (nothing if the generation or state moved on meanwhile)."""
        if generation_id != group.generation_id or \
                group.state not in (S.COMPLETING_REBALANCE, S.STABLE):
            return
        pending = [mid for mid in group.pending_sync_members if mid in group]
        group.clear_pending_sync_members()
        if not pending:
            return
        for mid in pending:
            group.remove(mid)
            self.heartbeat_purgatory.check_and_complete(MemberKey(group.group_id, mid))
        log.info("Group %s removed members who did not send SyncGroup within the rebalance "
                 "timeout of generation %d: %s", group.group_id, generation_id, pending)
        self._prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

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
        group.invoke_join_callback(member, JoinResult(int(E.UNKNOWN_MEMBER_ID), UNKNOWN_MEMBER_ID))
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
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return callback(self.consumer.migration.classic_sync(consumer_group, generation_id, member_id,
                                                       protocol_type, protocol_name))
        group = self.groups.get(group_id)
        if group is None:
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.is_state(S.DEAD):
            return fail(E.COORDINATOR_NOT_AVAILABLE)
        err = group.member_error(member_id, group_instance_id)
        if err != E.NONE:
            return fail(err)
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
            self._remove_pending_sync_member(group, member_id)
            self._complete_and_schedule_heartbeat(group, member)
            return callback(SyncResult(int(E.NONE), group.protocol_type, group.protocol_name,
                                       member.assignment))
        # CompletingRebalance
        if member.is_awaiting_sync:  # a duplicate: answer the earlier one
            group.invoke_sync_callback(member, SyncResult(int(E.REBALANCE_IN_PROGRESS)))
        member.sync_callback = callback
        self._remove_pending_sync_member(group, member_id)
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
        # Kafka's order: answer the waiting members (the leader first) inside this append
        # callback, then Stable; with Deferred responses no later request can overtake them
        self._propagate_assignment(group, E.NONE)
        group.transition_to(S.STABLE)

    def _reset_and_propagate_assignment_error(self, group, error: ErrorCode) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group, error: ErrorCode) -> None:
        """Answer every member waiting in SyncGroup, the leader first (its SyncGroup is the
        one that completed the rebalance; clients such as aiokafka expect it to know its
        assignment no later than its followers)."""
        members = sorted(group.members.values(), key=lambda m: not group.is_leader(m.member_id))
        for m in members:
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
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self.consumer.migration.classic_heartbeat(consumer_group, member_id, generation_id)
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.is_state(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        err = group.member_error(member_id, group_instance_id)
        if err != E.NONE:
            return err
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
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return E.NONE, self.consumer.migration.classic_leave(consumer_group, leaving)
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
            elif (err := group.member_error(member_id, instance_id)) != E.NONE:
                out.append(err)
            else:
                member = group.get(member_id)
                member.is_leaving = True
                self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, member_id))
                self._remove_member_and_update_group(group, member, "member left the group")
                out.append(E.NONE)
        return E.NONE, out
