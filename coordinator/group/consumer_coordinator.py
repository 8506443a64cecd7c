"""ConsumerGroupCoordinator: KIP-848 consumer groups next to the classic GroupCoordinator.

Kafka's GroupMetadataManager (consumer part), over the same ``__consumer_offsets``
partitions, ownership and offsets as the classic coordinator (``coordinator`` below): a
group id is either a classic group (``coordinator.groups``) or a consumer group
(``coordinator.consumer_groups``).

ConsumerGroupHeartbeat (``heartbeat``), in order:
1. request checks (INVALID_REQUEST with a message), coordinator checks (NOT_COORDINATOR,
   COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE);
2. epoch -1 leaves (the member is removed, the group epoch bumped), epoch -2 is a static
   member's temporary leave (kept with epoch -2 so a restart with the same instance id
   takes its assignment over without a rebalance);
3. the group is found or created (epoch 0); an existing classic group is converted: an
   Empty one at once, a non-empty ``consumer`` one online when
   ``group.consumer.migration.policy`` allows upgrades (its members become classic members
   of the consumer group, their assignments and offsets kept); otherwise GROUP_ID_NOT_FOUND;
   GROUP_MAX_SIZE_REACHED past ``group.consumer.max.size``;
4. the member: epoch 0 joins (member id from the client - v1, KIP-1082 - or generated; a
   static member whose instance id is held by a live member -> UNRELEASED_INSTANCE_ID);
   otherwise it must exist (UNKNOWN_MEMBER_ID) with the epoch the coordinator knows, or
   the previous one if the member owns nothing beyond its assignment (a lost response);
   else FENCED_MEMBER_EPOCH;
5. a changed subscription (names, regex - RE2 full match as Kafka's RE2/J - or the
   subscribed topics' partition counts) bumps the group epoch; a group epoch ahead of
   the assignment epoch runs the assignor (the members' preferred one, else the first of
   ``group.consumer.assignors``; UNSUPPORTED_ASSIGNOR for an unknown name);
6. the member reconciles towards its target (``consumer_group.reconcile``); a member
   that must revoke gets ``rebalance_timeout_ms`` to do so before it is fenced;
7. records are written (``consumer_records``) and the response carries the member epoch,
   ``group.consumer.heartbeat.interval.ms`` and the assignment when it changed or the
   request was a full one.
A member that does not heartbeat within ``group.consumer.session.timeout.ms`` is fenced.

Classic members (KIP-848 migration, Kafka 4.0) and the online up- and downgrades between
classic and consumer groups: ``consumer_migration.ClassicMigration`` (``self.migration``).
Settings: ``consumer_config.ConsumerGroupConfig``; what the consumer and share heartbeats
share (``TopicView``, ``HeartbeatResult``, ``HeartbeatError``): ``heartbeat_common``.

Simplification: an append failure answers the request's error but does not roll back the
in-memory change (Kafka reverts its timeline); the member's next heartbeat resynchronises.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace

from coordinator.group.assignors import ASSIGNORS, MemberSpec
from coordinator.group.consumer_config import ASSIGNOR_CLASSES, ConsumerGroupConfig
from coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    is_subset,
    reconcile,
    subscription_changed,
)
from coordinator.group.consumer_migration import ClassicMigration
from coordinator.group.consumer_records import (
    current_assignment_record,
    epoch_record,
    group_tombstones,
    member_metadata_record,
    member_tombstones,
    subscription_metadata_record,
    target_assignment_epoch_record,
    target_member_record,
)
from coordinator.group.group import GroupState
from coordinator.group.heartbeat_common import (
    LEAVE_EPOCH,
    HeartbeatError,
    HeartbeatResult,
    TopicView,
)
from coordinator.runtime import Deadline
from protocol.errors import ErrorCode

__all__ = ["ConsumerGroupCoordinator"]

log = logging.getLogger(__name__)
E = ErrorCode
_INTERNAL_TOPICS = frozenset(("__consumer_offsets", "__transaction_state", "__share_group_state"))
STATIC_LEAVE_EPOCH = -2


class ConsumerGroupCoordinator:
    """See the module docstring. ``coordinator``: the GroupCoordinator whose partitions,
    store, timer and clock are shared; ``topics``: a ``TopicView``."""

    def __init__(self, coordinator, config: ConsumerGroupConfig, topics: TopicView) -> None:
        self.coordinator = coordinator
        self.config = config
        self.topics = topics
        self.groups: dict[str, ConsumerGroup] = coordinator.consumer_groups
        self._session: dict[tuple[str, str], Deadline] = {}
        self._rebalance: dict[tuple[str, str], Deadline] = {}
        self._regex_cache: dict[str, object] = {}
        self.rebalances = 0  # group epoch bumps
        self.migration = ClassicMigration(self)

    # --- helpers -------------------------------------------------------------------------
    @property
    def time_ms(self):
        return self.coordinator.time_ms

    def _compile(self, regex: str):
        pat = self._regex_cache.get(regex)
        if pat is None:
            import re2
            try:
                pat = re2.compile(regex)
            except re2.error as e:
                raise HeartbeatError(
                    E.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{regex}` is not a valid regular expression: "
                    f"{e}.") from None
            if len(self._regex_cache) > 1000:
                self._regex_cache.clear()
            self._regex_cache[regex] = pat
        return pat

    def _member_topics(self, m: ConsumerGroupMember, all_names=None) -> set[str]:
        out = set(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            pat = self._compile(m.subscribed_topic_regex)
            names = all_names if all_names is not None else self.topics.names()
            out.update(n for n in names if n not in _INTERNAL_TOPICS and pat.fullmatch(n))
        return out

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, tuple[uuid.UUID, int]]:
        all_names = None
        if any(m.subscribed_topic_regex for m in group.members.values()):
            all_names = self.topics.names()
        names: set[str] = set()
        for m in group.members.values():
            names |= self._member_topics(m, all_names)
        out = {}
        for n in names:
            found = self.topics.lookup(n)
            if found is not None:
                out[n] = found
        return out

    def assignor_for(self, group: ConsumerGroup):
        """The assignor the group uses: the most preferred by its members, else the first
        configured one."""
        counts: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        name = max(sorted(counts), key=lambda n: counts[n]) if counts else self.config.assignors[0]
        return ASSIGNORS[name]

    def _bump(self, group: ConsumerGroup, records: list) -> None:
        group.group_epoch += 1
        self.rebalances += 1
        records.append(epoch_record(group.group_id, group.group_epoch))

    def _refresh_and_assign(self, group: ConsumerGroup, bump: bool, records: list) -> None:
        """Steps 5: subscription metadata, group epoch, target assignment."""
        meta = self._subscription_metadata(group)
        if meta != group.subscription_metadata:
            group.subscription_metadata = meta
            records.append(subscription_metadata_record(group.group_id, meta))
            bump = True
        if bump:
            self._bump(group, records)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, records)

    def _compute_target(self, group: ConsumerGroup, records: list) -> None:
        all_names = None
        if any(m.subscribed_topic_regex for m in group.members.values()):
            all_names = self.topics.names()
        meta = group.subscription_metadata
        specs = {}
        for mid, m in group.members.items():
            ids = frozenset(meta[n][0] for n in self._member_topics(m, all_names) if n in meta)
            specs[mid] = MemberSpec(ids, group.target.get(mid, {}))
        partitions = {tid: n for tid, n in meta.values()}
        new = self.assignor_for(group).assign(specs, partitions)
        for mid in group.members:
            a = new.get(mid, {})
            if group.target.get(mid) != a:
                group.target[mid] = a
                records.append(target_member_record(group.group_id, mid, a))
        group.assignment_epoch = group.group_epoch
        records.append(target_assignment_epoch_record(group.group_id, group.assignment_epoch))

    def _reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember,
                   owned: dict | None) -> ConsumerGroupMember:
        target = group.target.get(member.member_id, {})
        return reconcile(member, group.assignment_epoch, target, group.partition_epoch, owned)

    def _store(self, group: ConsumerGroup, old: ConsumerGroupMember | None,
               new: ConsumerGroupMember, records: list) -> None:
        """Write what changed of a member, and apply it to the group."""
        gid = group.group_id
        if old is None or _metadata_changed(old, new):
            records.append(member_metadata_record(gid, new))
        if old is None or (old.member_epoch, old.previous_member_epoch, old.state, old.assigned,
                           old.pending_revocation) != (new.member_epoch,
                                                       new.previous_member_epoch, new.state,
                                                       new.assigned, new.pending_revocation):
            records.append(current_assignment_record(gid, new))
        group.update_member(new)
        self._watch_revocation(group, new)

    async def _append(self, group_id: str, records: list) -> ErrorCode:
        return await self.coordinator.append_group_records(group_id, records)

    # --- timers ------------------------------------------------------------------------------
    def _schedule_session(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        key = (group_id, member_id)
        old = self._session.pop(key, None)
        if old is not None:
            old.cancel()
        task = self._session[key] = Deadline()
        task.schedule(self.coordinator.timer, timeout_ms,
                      lambda: self._expire(key, "session", task))

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        for timers in (self._session, self._rebalance):
            t = timers.pop((group_id, member_id), None)
            if t is not None:
                t.cancel()

    def _watch_revocation(self, group: ConsumerGroup, m: ConsumerGroupMember) -> None:
        """A member asked to revoke gets its rebalance timeout to do it (Kafka's
        scheduleConsumerGroupRebalanceTimeout); the timer stops once it moved on."""
        key = (group.group_id, m.member_id)
        if m.state is MemberState.UNREVOKED_PARTITIONS and not m.uses_classic_protocol:
            if key not in self._rebalance:
                epoch = m.member_epoch
                task = self._rebalance[key] = Deadline()
                task.schedule(self.coordinator.timer, max(m.rebalance_timeout_ms, 1),
                              lambda: self._expire_revocation(key, epoch, task))
        else:
            t = self._rebalance.pop(key, None)
            if t is not None:
                t.cancel()

    def _expire(self, key, why: str, task) -> None:
        if self._session.get(key) is not task:
            return
        del self._session[key]
        self._fence_later(key, f"the member {why} expired")

    def _expire_revocation(self, key, epoch: int, task) -> None:
        if self._rebalance.get(key) is not task:
            return
        del self._rebalance[key]
        group = self.groups.get(key[0])
        m = group.members.get(key[1]) if group is not None else None
        if m is not None and m.state is MemberState.UNREVOKED_PARTITIONS and \
                m.member_epoch == epoch:
            self._fence_later(key, "the member failed to revoke partitions within the "
                                   "rebalance timeout")

    def _fence_later(self, key, reason: str) -> None:
        group = self.groups.get(key[0])
        if group is None or key[1] not in group.members:
            return
        log.info("[GroupId %s] Member %s fenced from the group because %s.", key[0], key[1],
                 reason)
        records = self._remove_member(group, key[1])
        self.coordinator._spawn(self._append_after_fence(group, records))

    async def _append_after_fence(self, group: ConsumerGroup, records: list) -> None:
        await self._append(group.group_id, records)
        await self.migration.maybe_downgrade(group)

    def _remove_member(self, group: ConsumerGroup, member_id: str) -> list:
        """Kafka's removeMember + group epoch bump (target recomputed at the next heartbeat)."""
        self._cancel_timers(group.group_id, member_id)
        group.remove_member(member_id)
        records = member_tombstones(group.group_id, member_id)
        self._bump(group, records)
        group.note_state()
        return records

    # --- ConsumerGroupHeartbeat --------------------------------------------------------------
    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int,
                        instance_id: str | None, rack_id: str | None, rebalance_timeout_ms: int,
                        subscribed_topic_names: list[str] | None,
                        subscribed_topic_regex: str | None, server_assignor: str | None,
                        owned: dict | None, client_id: str = "", client_host: str = "",
                        version: int = 1) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat (see the module docstring). ``owned``:
        ``{topic_id: frozenset}`` or None when the request left it out."""
        try:
            self._validate(group_id, member_id, member_epoch, instance_id, rebalance_timeout_ms,
                           subscribed_topic_names, subscribed_topic_regex, server_assignor,
                           owned, version)
            err = self.coordinator.coordinator_error(group_id)
            if err != E.NONE:
                return HeartbeatResult(err)
            if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return await self._leave(group_id, member_id, member_epoch, instance_id)
            return await self._heartbeat(group_id, member_id, member_epoch, instance_id, rack_id,
                                         rebalance_timeout_ms, subscribed_topic_names,
                                         subscribed_topic_regex, server_assignor, owned,
                                         client_id, client_host)
        except HeartbeatError as f:
            return HeartbeatResult(f.error, f.message)

    def _validate(self, group_id, member_id, epoch, instance_id, rebalance_timeout_ms, names,
                  regex, assignor, owned, version) -> None:
        def bad(msg: str) -> HeartbeatError:
            return HeartbeatError(E.INVALID_REQUEST, msg)

        if not self.config.enabled:
            raise HeartbeatError(
                E.UNSUPPORTED_VERSION, "The consumer rebalance protocol is disabled "
                "(group.coordinator.rebalance.protocols).")
        if not group_id:
            raise bad("GroupId can't be empty.")
        if instance_id is not None and not instance_id:
            raise bad("InstanceId can't be empty.")
        if epoch == 0:
            if version >= 1 and not member_id:
                raise bad("MemberId can't be empty.")
            if rebalance_timeout_ms == -1:
                raise bad("RebalanceTimeoutMs must be provided in first request.")
            if owned:
                raise bad("TopicPartitions must be empty when (re-)joining.")
            if names is None and regex is None:
                raise bad("SubscribedTopicNames or SubscribedTopicRegex must be set in first "
                          "request.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if not member_id:
                raise bad("MemberId can't be empty.")
            if instance_id is None:
                raise bad("InstanceId can't be null.")
        elif epoch < STATIC_LEAVE_EPOCH:
            raise bad(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
        elif not member_id:
            raise bad("MemberId can't be empty.")
        if assignor is not None and ASSIGNOR_CLASSES.get(assignor, assignor) \
                not in self.config.assignors:
            raise HeartbeatError(
                E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. "
                f"Supported assignors: {', '.join(self.config.assignors)}.")
        if regex is not None:
            self._compile(regex)

    def _group_for_join(self, group_id: str, create: bool, records: list) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        share = self.coordinator.share
        if share is not None and group_id in share.groups:
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        classic = self.coordinator.groups.get(group_id)
        if classic is not None and not classic.is_state(GroupState.DEAD):
            if not create:
                raise HeartbeatError(
                    E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            if classic.is_state(GroupState.EMPTY):
                return self.migration.adopt_empty_classic(classic, records)
            if not self.migration.upgradable(classic):
                raise HeartbeatError(
                    E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            return self.migration.convert_from_classic(classic, records)
        if not create:
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        group = ConsumerGroup(group_id, self.time_ms)
        self.groups[group_id] = group
        return group

    async def _heartbeat(self, group_id, member_id, member_epoch, instance_id, rack_id,
                         rebalance_timeout_ms, names, regex, assignor, owned, client_id,
                         client_host) -> HeartbeatResult:
        records: list = []
        joining = member_epoch == 0
        group = self._group_for_join(group_id, joining, records)
        if not member_id:
            member_id = str(uuid.uuid4())
        old = self._find_member(group, member_id, member_epoch, instance_id, owned, records)
        base = old if old is not None else ConsumerGroupMember(member_id)
        if old is not None and old.member_id != member_id:  # static member replaced
            base = replace(old, member_id=member_id)
        new = replace(
            base,
            instance_id=instance_id if instance_id is not None else base.instance_id,
            rack_id=rack_id if rack_id is not None else base.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms != -1
            else base.rebalance_timeout_ms,
            server_assignor=assignor if assignor is not None else base.server_assignor,
            subscribed_topic_names=tuple(names) if names is not None
            else base.subscribed_topic_names,
            subscribed_topic_regex=(regex or None) if regex is not None
            else base.subscribed_topic_regex,
            client_id=client_id, client_host=client_host, classic=None)
        replaced = old is not None and old.member_id != member_id
        if replaced:
            self._replace_static(group, old.member_id, member_id, records)
        bump = old is None and not replaced or subscription_changed(base, new)
        group.update_member(new)  # subscriptions count from here (target uses them)
        self._refresh_and_assign(group, bump, records)
        reconciled = self._reconcile(group, new, owned)
        self._store(group, None if (old is None or replaced) else old, reconciled, records)
        if replaced:
            records.append(target_member_record(group_id, member_id,
                                                group.target.get(member_id, {})))
        group.note_state()
        session_ms, heartbeat_ms = self.config.timeouts(group_id)
        self._schedule_session(group_id, member_id, session_ms)
        err = await self._append(group_id, records)
        if err != E.NONE:
            return HeartbeatResult(err)
        full = member_epoch == 0 or (rebalance_timeout_ms != -1 and names is not None
                                     and owned is not None)
        changed = old is None or old.assigned != reconciled.assigned
        return HeartbeatResult(E.NONE, None, member_id, reconciled.member_epoch,
                               heartbeat_ms,
                               reconciled.assigned if full or changed else None)

    def _find_member(self, group: ConsumerGroup, member_id: str, epoch: int,
                     instance_id: str | None, owned, records) -> ConsumerGroupMember | None:
        """The member the request is about (None = a new one); raises HeartbeatError."""
        if instance_id is not None:
            held = group.member_by_instance(instance_id)
            if epoch == 0:
                if held is None or held.member_id == member_id:
                    return held
                if held.member_epoch != STATIC_LEAVE_EPOCH:
                    raise HeartbeatError(
                        E.UNRELEASED_INSTANCE_ID,
                        f"Static member {held.member_id} with instance id "
                        f"{instance_id} is not released yet.")
                return held  # replaced by the new member id
            if held is None or held.member_id != member_id:
                raise HeartbeatError(
                    E.FENCED_INSTANCE_ID if held is not None else E.UNKNOWN_MEMBER_ID,
                    f"Static member {member_id} with instance id {instance_id} is "
                    f"not known or was replaced.")
        member = group.members.get(member_id)
        if epoch == 0:
            if member is None and group.size >= self.config.max_size:
                raise HeartbeatError(
                    E.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its "
                    f"maximum capacity of {self.config.max_size} members.")
            return member
        if member is None:
            raise HeartbeatError(
                E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                f"{group.group_id}.")
        if member.uses_classic_protocol:
            raise HeartbeatError(
                E.UNKNOWN_MEMBER_ID, f"Member {member_id} uses the classic protocol.")
        if epoch > member.member_epoch or (
                epoch < member.member_epoch and (epoch != member.previous_member_epoch
                                                 or not is_subset(owned, member.assigned))):
            raise HeartbeatError(
                E.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a {'greater' if epoch > member.member_epoch else 'smaller'} member epoch ({epoch}) than the one known by "
                f"the group coordinator ({member.member_epoch}). The member must "
                f"abandon all its partitions and rejoin.")
        return member

    def _replace_static(self, group: ConsumerGroup, old_id: str, new_id: str,
                        records: list) -> None:
        """A static member's new member id takes the old one's target over."""
        target = group.target.get(old_id, {})
        group.remove_member(old_id)
        self._cancel_timers(group.group_id, old_id)
        records += member_tombstones(group.group_id, old_id)
        group.target[new_id] = target

    async def _leave(self, group_id, member_id, epoch, instance_id) -> HeartbeatResult:
        group = self.groups.get(group_id)
        if group is None:
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        member = group.members.get(member_id)
        if member is None and instance_id is not None:
            member = group.member_by_instance(instance_id)
            if member is not None and member.member_id != member_id:
                raise HeartbeatError(
                    E.FENCED_INSTANCE_ID, f"Static member {instance_id} was replaced.")
        if member is None:
            raise HeartbeatError(
                E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                f"{group_id}.")
        if epoch == STATIC_LEAVE_EPOCH:
            left = replace(member, member_epoch=STATIC_LEAVE_EPOCH,
                           previous_member_epoch=member.member_epoch)
            records = [current_assignment_record(group_id, left)]
            group.update_member(left)
            self._watch_revocation(group, left)
        else:
            records = self._remove_member(group, member.member_id)
        err = await self._append(group_id, records)
        if err != E.NONE:
            return HeartbeatResult(err)
        if epoch == LEAVE_EPOCH:
            await self.migration.maybe_downgrade(group)
        return HeartbeatResult(E.NONE, None, member.member_id, epoch, 0, None)

    # --- offsets, describe, delete -----------------------------------------------------------
    def validate_offset_commit(self, group: ConsumerGroup, member_id: str,
                               instance_id: str | None, epoch: int) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit: epoch < 0 from outside the group is
        accepted only while the group is empty; else the member must exist and commit with
        its current epoch (STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION for classic members)."""
        if epoch < 0 and not group.members:
            return E.NONE
        m = group.members.get(member_id)
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if epoch != m.member_epoch:
            return E.ILLEGAL_GENERATION if m.uses_classic_protocol else E.STALE_MEMBER_EPOCH
        return E.NONE

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None,
                              epoch: int) -> ErrorCode:
        if not member_id and epoch < 0:  # admin tools and classic clients send no member
            return E.NONE
        m = group.members.get(member_id or "")
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if epoch != m.member_epoch:
            return E.ILLEGAL_GENERATION if m.uses_classic_protocol else E.STALE_MEMBER_EPOCH
        return E.NONE

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        err = self.coordinator.coordinator_error(group_id)
        if err != E.NONE:
            return err, None, None
        group = self.groups.get(group_id)
        if group is None:
            if group_id in self.coordinator.groups:
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
            return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        return E.NONE, None, group

    def member_topics(self, m: ConsumerGroupMember) -> set[str]:
        try:
            return self._member_topics(m)
        except HeartbeatError:
            return set(m.subscribed_topic_names)

    async def delete_group(self, group: ConsumerGroup) -> ErrorCode:
        """DeleteGroups of an Empty consumer group: offsets and group records tombstoned."""
        from coordinator.group.records import offset_tombstone
        if group.members:
            return E.NON_EMPTY_GROUP
        records = [offset_tombstone(group.group_id, *tp) for tp in group.offsets]
        records += group_tombstones(group)
        group.dead = True
        group.offsets.clear()
        self.groups.pop(group.group_id, None)
        return await self._append(group.group_id, records)

    def on_group_loaded(self, group: ConsumerGroup) -> None:
        """Every member's session starts anew after a load (Kafka's onLoaded)."""
        for m in group.members.values():
            timeout = m.classic.session_timeout_ms if m.classic is not None \
                else self.config.timeouts(group.group_id)[0]
            self._schedule_session(group.group_id, m.member_id, timeout)
            self._watch_revocation(group, m)

    def on_group_unloaded(self, group: ConsumerGroup) -> None:
        for mid in list(group.members):
            self._cancel_timers(group.group_id, mid)

    def shutdown(self) -> None:
        for timers in (self._session, self._rebalance):
            for t in timers.values():
                t.cancel()
            timers.clear()


def _metadata_changed(a: ConsumerGroupMember, b: ConsumerGroupMember) -> bool:
    return (a.instance_id, a.rack_id, a.client_id, a.client_host, a.rebalance_timeout_ms,
            a.subscribed_topic_names, a.subscribed_topic_regex, a.server_assignor,
            a.classic) != (b.instance_id, b.rack_id, b.client_id, b.client_host,
                           b.rebalance_timeout_ms, b.subscribed_topic_names,
                           b.subscribed_topic_regex, b.server_assignor, b.classic)
