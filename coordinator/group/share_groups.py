"""Share-group membership in the group coordinator (KIP-932; Kafka's GroupMetadataManager
share paths): ShareGroupHeartbeat, ShareGroupDescribe, ListGroups/DeleteGroups of share
groups, and the share-group offsets admin APIs.

Heartbeat (``heartbeat``): member epoch 0 joins (a member id from the client, else a new
UUID), > 0 heartbeats, -1 leaves. Errors (top level, Kafka's messages): INVALID_REQUEST
("GroupId can't be empty.", "MemberId can't be empty.", "RackId can't be empty.",
"SubscribedTopicNames must be set in first request.", "MemberEpoch is invalid."),
GROUP_ID_NOT_FOUND ("Group g is not a share group." when the id belongs to a classic or
consumer group, "Share group g not found." for a heartbeat to a missing group),
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH (a greater epoch than known, or a smaller one that is
not the previous epoch), GROUP_MAX_SIZE_REACHED (``group.share.max.size``), and the
coordinator errors. A join or a changed subscription bumps the group epoch, so does a change
of the subscribed topics' partition counts (checked at every heartbeat); a new group epoch
computes the target assignment (``coordinator.share.assignor``) and every member takes its
target at its next heartbeat (no revocation in share groups). The answer carries the
assignment when the member joined or its assignment changed, and the heartbeat interval
(``share.heartbeat.interval.ms`` of the group, else ``group.share.heartbeat.interval.ms``).
A member that does not heartbeat within ``share.session.timeout.ms`` is fenced; leaving or
being fenced writes tombstones and bumps the group epoch.

Records go to the group's ``__consumer_offsets`` partition before the answer
(``coordinator.group.share_group_records``). ``initialized`` (ShareGroupStatePartitionMetadata)
grows with every partition ever assigned: those may have state in ``__share_group_state``.

Admin (``describe_offsets``, ``alter_offsets``, ``delete_offsets``, ``delete_group``) reach
the share coordinator through ``persister`` (ReadShareGroupStateSummary,
InitializeShareGroupState with state epoch + 1, DeleteShareGroupState).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import zlib
from collections.abc import Callable
from dataclasses import replace

from coordinator.group.group import GroupState
from coordinator.group.heartbeat_common import (
    LEAVE_EPOCH,
    HeartbeatError,
    HeartbeatResult,
    TopicView,
)
from coordinator.group.share_group import Assignment, ShareGroup, ShareGroupMember
from coordinator.group.share_group_records import (
    current_assignment_record,
    epoch_record,
    group_tombstones,
    member_metadata_record,
    member_tombstones,
    state_partition_record,
    target_epoch_record,
    target_member_record,
)
from coordinator.runtime import Deadline
from coordinator.share.assignor import DEFAULT_ALL_MEMBERS_LIMIT, assign_share_group
from coordinator.share.persister import (
    DeleteStateRequest,
    InitializeStateRequest,
    ReadStateSummaryRequest,
)
from protocol.errors import ErrorCode

__all__ = ["ShareGroupConfig", "ShareGroupCoordinator"]

log = logging.getLogger(__name__)
E = ErrorCode
ASSIGNOR_NAME = "simple"


class ShareGroupConfig:
    """Broker-wide share group settings; ``timeouts(group)`` applies GROUP config overrides
    (``share.session.timeout.ms`` / ``share.heartbeat.interval.ms``)."""

    def __init__(self, session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000,
                 max_size: int = 200, all_members_limit: int = DEFAULT_ALL_MEMBERS_LIMIT) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.all_members_limit = all_members_limit
        self.group_overrides: Callable[[str], tuple[int, int]] | None = None

    def timeouts(self, group_id: str) -> tuple[int, int]:
        if self.group_overrides is not None:
            return self.group_overrides(group_id)
        return self.session_timeout_ms, self.heartbeat_interval_ms

    @classmethod
    def from_kafka_config(cls, config) -> ShareGroupConfig:
        return cls(config.get("group.share.session.timeout.ms"),
                   config.get("group.share.heartbeat.interval.ms"),
                   config.get("group.share.max.size"))


class ShareGroupCoordinator:
    """See the module docstring. ``coordinator`` is the GroupCoordinator (partitions, store,
    timer, clock); ``persister`` reaches the share coordinator (None: admin offsets answer
    COORDINATOR_NOT_AVAILABLE)."""

    def __init__(self, coordinator, config: ShareGroupConfig, topics: TopicView,
                 persister=None) -> None:
        self.coordinator = coordinator
        self.config = config
        self.topics = topics
        self.persister = persister
        self.groups: dict[str, ShareGroup] = {}
        self._session: dict[tuple[str, str], Deadline] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # --- helpers -----------------------------------------------------------------------------
    def _lock(self, group_id: str) -> asyncio.Lock:
        lock = self._locks.get(group_id)
        if lock is None:
            lock = self._locks[group_id] = asyncio.Lock()
        return lock

    def _other_group(self, group_id: str) -> bool:
        c = self.coordinator
        return group_id in c.consumer_groups or (
            group_id in c.groups and not c.groups[group_id].is_state(GroupState.DEAD))

    async def _append(self, group_id: str, records: list) -> ErrorCode:
        return await self.coordinator.append_group_records(group_id, records)

    def _metadata(self, group: ShareGroup) -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        for name in sorted(group.subscribed_topics()):
            found = self.topics.lookup(name)
            if found is not None:
                out[name] = found
        return out

    def _assign(self, group: ShareGroup, records: list) -> None:
        """A new target assignment at the group epoch (Kafka's updateTargetAssignment)."""
        meta = group.subscription_metadata
        names = {tid: name for name, (tid, _) in meta.items()}
        current = {mid: {names[t]: ps for t, ps in a.items() if t in names}
                   for mid, a in group.target.items() if mid in group.members}
        target = assign_share_group(
            {mid: m.subscribed_topic_names for mid, m in group.members.items()},
            {name: n for name, (_, n) in meta.items()}, current,
            all_members_limit=self.config.all_members_limit)
        for mid in group.members:
            new: Assignment = {meta[t][0]: frozenset(ps)
                               for t, ps in target.get(mid, {}).items() if ps}
            if group.target.get(mid) != new:
                group.target[mid] = new
                records.append(target_member_record(group.group_id, mid, new))
        group.assignment_epoch = group.group_epoch
        records.append(target_epoch_record(group.group_id, group.group_epoch))
        grown = False
        for a in group.target.values():
            for tid, ps in a.items():
                name, known = group.initialized.get(tid, (names.get(tid, ""), frozenset()))
                if not ps <= known:
                    group.initialized[tid] = (name, known | ps)
                    grown = True
        if grown:
            records.append(state_partition_record(group.group_id, group.initialized))

    def _bump(self, group: ShareGroup, records: list) -> None:
        group.group_epoch += 1
        group.subscription_metadata = self._metadata(group)
        group.metadata_hash = zlib.crc32(repr(sorted(
            (n, str(t), c) for n, (t, c) in group.subscription_metadata.items())).encode())
        records.append(epoch_record(group.group_id, group.group_epoch, group.metadata_hash))

    # --- timers ------------------------------------------------------------------------------
    def _schedule_session(self, group_id: str, member_id: str) -> None:
        key = (group_id, member_id)
        old = self._session.pop(key, None)
        if old is not None:
            old.cancel()
        task = self._session[key] = Deadline()
        task.schedule(self.coordinator.timer, self.config.timeouts(group_id)[0],
                      lambda: self._expire(key, task))

    def _cancel_session(self, group_id: str, member_id: str) -> None:
        t = self._session.pop((group_id, member_id), None)
        if t is not None:
            t.cancel()

    def _expire(self, key, task) -> None:
        if self._session.get(key) is not task:
            return
        del self._session[key]
        group = self.groups.get(key[0])
        if group is None or key[1] not in group.members:
            return
        log.info("[GroupId %s] Member %s fenced from the share group because its session "
                 "expired.", key[0], key[1])
        self.coordinator._spawn(self._fence(group, key[1]))

    async def _fence(self, group: ShareGroup, member_id: str) -> ErrorCode:
        async with self._lock(group.group_id):
            if self.groups.get(group.group_id) is not group or member_id not in group.members:
                return E.NONE
            records = self._remove_member(group, member_id)
            return await self._append(group.group_id, records)

    def _remove_member(self, group: ShareGroup, member_id: str) -> list:
        self._cancel_session(group.group_id, member_id)
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        records = member_tombstones(group.group_id, member_id)
        self._bump(group, records)
        return records

    # --- ShareGroupHeartbeat -----------------------------------------------------------------
    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int,
                        rack_id: str | None, names: list[str] | None, client_id: str = "",
                        client_host: str = "") -> HeartbeatResult:
        try:
            _validate(group_id, member_id, member_epoch, rack_id, names)
            err = self.coordinator.coordinator_error(group_id)
            if err != E.NONE:
                return HeartbeatResult(err)
            async with self._lock(group_id):
                if member_epoch == LEAVE_EPOCH:
                    return await self._leave(group_id, member_id)
                return await self._heartbeat(group_id, member_id, member_epoch, rack_id, names,
                                             client_id, client_host)
        except HeartbeatError as f:
            return HeartbeatResult(f.error, f.message)

    def _group(self, group_id: str, create: bool) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if self._other_group(group_id):
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if not create:
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        group = self.groups[group_id] = ShareGroup(group_id)
        return group

    async def _heartbeat(self, group_id, member_id, member_epoch, rack_id, names, client_id,
                         client_host) -> HeartbeatResult:
        joining = member_epoch == 0
        group = self._group(group_id, joining)
        if not member_id:
            member_id = str(uuid.uuid4())
        old = group.members.get(member_id)
        if old is None and not joining:
            raise HeartbeatError(
                E.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group_id}.")
        if old is None and len(group.members) >= self.config.max_size:
            raise HeartbeatError(
                E.GROUP_MAX_SIZE_REACHED, "The share group has reached its maximum "
                f"capacity of {self.config.max_size} members.")
        if old is not None and member_epoch != 0:
            _check_epoch(old, member_epoch)
        records: list = []
        base = old or ShareGroupMember(member_id)
        new = replace(base, rack_id=rack_id if rack_id is not None else base.rack_id,
                      subscribed_topic_names=tuple(names) if names is not None
                      else base.subscribed_topic_names,
                      client_id=client_id, client_host=client_host)
        if old is None or new != old:
            records.append(member_metadata_record(group_id, new))
            if old is None:
                log.info("[GroupId %s] Member %s joins the share group.", group_id, member_id)
        group.members[member_id] = new
        bump = old is None or new.subscribed_topic_names != old.subscribed_topic_names \
            or self._metadata(group) != group.subscription_metadata
        if bump:
            self._bump(group, records)
        if group.group_epoch > group.assignment_epoch:
            self._assign(group, records)
        target = group.target.get(member_id, {})
        if new.member_epoch != group.assignment_epoch or new.assigned != target:
            new = replace(new, previous_member_epoch=new.member_epoch,
                          member_epoch=group.assignment_epoch, assigned=target)
            group.members[member_id] = new
            records.append(current_assignment_record(group_id, new))
        self._schedule_session(group_id, member_id)
        err = await self._append(group_id, records)
        if err != E.NONE:
            return HeartbeatResult(err)
        changed = old is None or old.assigned != new.assigned
        return HeartbeatResult(E.NONE, None, member_id, new.member_epoch,
                               self.config.timeouts(group_id)[1],
                               new.assigned if joining or changed else None)

    async def _leave(self, group_id: str, member_id: str) -> HeartbeatResult:
        group = self._group(group_id, False)
        if member_id not in group.members:
            raise HeartbeatError(
                E.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group_id}.")
        log.info("[GroupId %s] Member %s left the share group.", group_id, member_id)
        records = self._remove_member(group, member_id)
        err = await self._append(group_id, records)
        return HeartbeatResult(err, None, member_id, LEAVE_EPOCH)

    # --- describe / list / delete --------------------------------------------------------------
    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        err = self.coordinator.coordinator_error(group_id)
        if err != E.NONE:
            return err, None, None
        group = self.groups.get(group_id)
        if group is None:
            if self._other_group(group_id):
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", None
            return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        return E.NONE, None, group

    async def delete_group(self, group: ShareGroup) -> ErrorCode:
        """DeleteGroups of an Empty share group: its share state, then its records."""
        async with self._lock(group.group_id):
            if group.members:
                return E.NON_EMPTY_GROUP
            for tid, _, p in group.state_partitions():
                code = await self._persist("delete_state", DeleteStateRequest(group.group_id,
                                                                              tid, p))
                if code not in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION):
                    return code
            records = group_tombstones(group)
            group.dead = True
            self.groups.pop(group.group_id, None)
            return await self._append(group.group_id, records)

    async def _persist(self, op: str, request):
        if self.persister is None:
            return E.COORDINATOR_NOT_AVAILABLE
        try:
            return await getattr(self.persister, op)(request)
        except Exception:  # noqa: BLE001 - the admin answer carries the error
            log.exception("share state %s failed for %s", op, request)
            return E.COORDINATOR_NOT_AVAILABLE

    # --- offsets admin -----------------------------------------------------------------------
    def _admin_group(self, group_id: str) -> ShareGroup:
        err = self.coordinator.coordinator_error(group_id)
        if err != E.NONE:
            raise HeartbeatError(err)
        group = self.groups.get(group_id)
        if group is None:
            if self._other_group(group_id):
                raise HeartbeatError(
                    E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return group

    async def describe_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None):
        """(error, message, [(topic, topic id, [(partition, start offset, leader epoch,
        error, message)])]); ``topics`` None = every partition the group has state for."""
        try:
            group = self._admin_group(group_id)
        except HeartbeatError as f:
            return f.error, f.message, []
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for tid, name, p in group.state_partitions():
                by_topic.setdefault(self.topics.name_of(tid) or name, []).append(p)
            topics = sorted(by_topic.items())
        out = []
        for name, parts in topics:
            found = self.topics.lookup(name)
            if found is None:
                out.append((name, None, [(p, -1, -1, E.UNKNOWN_TOPIC_OR_PARTITION,
                                          "The topic does not exist.") for p in parts]))
                continue
            tid, _ = found
            results = await asyncio.gather(*(
                self._summary(group_id, tid, p) for p in parts))
            out.append((name, tid, [(p, *r) for p, r in zip(parts, results, strict=True)]))
        return E.NONE, None, out

    async def _summary(self, group_id: str, tid: uuid.UUID, p: int):
        if self.persister is None:
            return -1, -1, E.COORDINATOR_NOT_AVAILABLE, None
        try:
            r = await self.persister.read_state_summary(ReadStateSummaryRequest(group_id, tid, p))
        except Exception:  # noqa: BLE001
            return -1, -1, E.COORDINATOR_NOT_AVAILABLE, None
        return r.start_offset, r.leader_epoch, E(r.error_code), r.error_message

    async def alter_offsets(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]]):
        """(error, message, [(topic, id, [(partition, error, message)])]): the group must be
        Empty (NON_EMPTY_GROUP); each partition's state restarts at the offset with a new
        state epoch (a running leader is fenced and reloads)."""
        try:
            group = self._admin_group(group_id)
        except HeartbeatError as f:
            return f.error, f.message, []
        async with self._lock(group_id):
            if group.members:
                return E.NON_EMPTY_GROUP, "The group is not empty.", []
            out = []
            grown = False
            for name, parts in topics:
                found = self.topics.lookup(name)
                if found is None:
                    out.append((name, None, [(p, E.UNKNOWN_TOPIC_OR_PARTITION,
                                              "The topic does not exist.") for p, _ in parts]))
                    continue
                tid, count = found
                res = []
                for p, offset in parts:
                    if not 0 <= p < count:
                        res.append((p, E.UNKNOWN_TOPIC_OR_PARTITION, None))
                        continue
                    code = await self._reset_partition(group_id, tid, p, offset)
                    if code == E.NONE:
                        old_name, known = group.initialized.get(tid, (name, frozenset()))
                        if p not in known:
                            group.initialized[tid] = (name, known | {p})
                            grown = True
                    res.append((p, code, None))
                out.append((name, tid, res))
            if grown:
                await self._append(group_id, [state_partition_record(group_id,
                                                                     group.initialized)])
            return E.NONE, None, out

    async def _reset_partition(self, group_id: str, tid: uuid.UUID, p: int, offset: int) -> int:
        epoch, _, code, _ = await self._summary_epoch(group_id, tid, p)
        if code != E.NONE:
            return code
        return await self._persist("initialize_state",
                                   InitializeStateRequest(group_id, tid, p, epoch + 1, offset))

    async def _summary_epoch(self, group_id: str, tid: uuid.UUID, p: int):
        if self.persister is None:
            return 0, -1, E.COORDINATOR_NOT_AVAILABLE, None
        try:
            r = await self.persister.read_state_summary(ReadStateSummaryRequest(group_id, tid, p))
        except Exception:  # noqa: BLE001
            return 0, -1, E.COORDINATOR_NOT_AVAILABLE, None
        return r.state_epoch, r.start_offset, E(r.error_code), r.error_message

    async def delete_offsets(self, group_id: str, names: list[str]):
        """(error, message, [(topic, id, error, message)]): a topic a member subscribes to
        answers GROUP_SUBSCRIBED_TO_TOPIC; else its share state is deleted."""
        try:
            group = self._admin_group(group_id)
        except HeartbeatError as f:
            return f.error, f.message, []
        async with self._lock(group_id):
            subscribed = group.subscribed_topics()
            out = []
            changed = False
            for name in names:
                found = self.topics.lookup(name)
                if found is None:
                    out.append((name, None, E.UNKNOWN_TOPIC_OR_PARTITION,
                                "The topic does not exist."))
                    continue
                tid, _ = found
                if name in subscribed:
                    out.append((name, tid, E.GROUP_SUBSCRIBED_TO_TOPIC,
                                "The group has active consumers subscribed to the topic."))
                    continue
                code = E.NONE
                for p in sorted(group.initialized.get(tid, ("", frozenset()))[1]):
                    code = await self._persist("delete_state", DeleteStateRequest(group_id,
                                                                                  tid, p))
                    if code not in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION):
                        break
                else:
                    code = E.NONE
                    if group.initialized.pop(tid, None) is not None:
                        changed = True
                out.append((name, tid, code, None))
            if changed:
                await self._append(group_id, [state_partition_record(group_id,
                                                                     group.initialized)])
            return E.NONE, None, out

    # --- loading -----------------------------------------------------------------------------
    def on_group_loaded(self, group: ShareGroup) -> None:
        """Every member's session starts anew after a load."""
        self.groups[group.group_id] = group
        for mid in group.members:
            self._schedule_session(group.group_id, mid)

    def on_partition_unloaded(self, partition: int) -> None:
        for gid in [g for g in self.groups if self.coordinator.partition_for(g) == partition]:
            group = self.groups.pop(gid)
            group.dead = True
            for mid in list(group.members):
                self._cancel_session(gid, mid)

    def shutdown(self) -> None:
        for t in self._session.values():
            t.cancel()
        self._session.clear()
        self.groups.clear()


def _validate(group_id: str, member_id: str, epoch: int, rack_id: str | None,
              names: list[str] | None) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""
    if not group_id:
        raise HeartbeatError(E.INVALID_REQUEST, "GroupId can't be empty.")
    if rack_id is not None and not rack_id:
        raise HeartbeatError(E.INVALID_REQUEST, "RackId can't be empty.")
    if epoch > 0 or epoch == LEAVE_EPOCH:
        if not member_id:
            raise HeartbeatError(E.INVALID_REQUEST, "MemberId can't be empty.")
    elif epoch == 0:
        if not names:
            raise HeartbeatError(
                E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    else:
        raise HeartbeatError(E.INVALID_REQUEST, "MemberEpoch is invalid.")


def _check_epoch(member: ShareGroupMember, received: int) -> None:
    """Kafka's throwIfShareGroupMemberEpochIsInvalid."""
    if received > member.member_epoch:
        raise HeartbeatError(
            E.FENCED_MEMBER_EPOCH, "The share group member has a greater member epoch "
            f"({received}) than the one known by the group coordinator "
            f"({member.member_epoch}). The member must abandon all its partitions and "
            "rejoin.")
    if received < member.member_epoch and received != member.previous_member_epoch:
        raise HeartbeatError(
            E.FENCED_MEMBER_EPOCH, "The share group member has a smaller member epoch "
            f"({received}) than the one known by the group coordinator "
            f"({member.member_epoch}). The member must abandon all its partitions and "
            "rejoin.")
