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

Classic members (KIP-848 migration, Kafka 4.0): JoinGroup/SyncGroup/Heartbeat/LeaveGroup
for a consumer group are served here (``classic_join`` ...): the subscription comes from
the consumer protocol metadata, the JoinGroup answers at once with generation = member
epoch and no leader, SyncGroup returns the member's current assignment, Heartbeat answers
REBALANCE_IN_PROGRESS while the member is not Stable at the assignment epoch (it rejoins,
reporting its owned partitions). When the last consumer-protocol member leaves and only
classic members remain, the group turns back into a classic group and rebalances (if the
policy allows downgrades).

Simplification: an append failure answers the request's error but does not roll back the
in-memory change (Kafka reverts its timeline); the member's next heartbeat resynchronises.
"""

from __future__ import annotations

import logging
import struct
import uuid
from dataclasses import replace

from common.config_error import ConfigError
from coordinator.group.assignors import ASSIGNORS, MemberSpec
from coordinator.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    is_subset,
    reconcile,
)
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
from coordinator.group.group import (
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
    SyncResult,
)
from coordinator.group.records import group_metadata_record, group_tombstone
from coordinator.runtime import Deadline
from protocol.errors import ErrorCode
from protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = ["ConsumerGroupConfig", "ConsumerGroupCoordinator", "HeartbeatResult", "TopicView"]

log = logging.getLogger(__name__)
E = ErrorCode
_INTERNAL_TOPICS = frozenset(("__consumer_offsets", "__transaction_state", "__share_group_state"))
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


class ConsumerGroupConfig:
    """``group.consumer.*`` settings (times in ms). ``group_overrides(group_id, session_ms,
    heartbeat_ms) -> (session_ms, heartbeat_ms)``, when set, applies a group's
    ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` (GROUP config
    resources, broker.group_configs)."""

    group_overrides = None

    def __init__(self, session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000,
                 max_size: int = 2**31 - 1, assignors: tuple[str, ...] = ("uniform", "range"),
                 migration_policy: str = "bidirectional", classic_max_size: int = 2**31 - 1,
                 enabled: bool = True) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.assignors = tuple(_ASSIGNOR_CLASSES.get(a, a) for a in assignors)
        unknown = [a for a in self.assignors if a not in ASSIGNORS]
        if unknown or not self.assignors:
            raise ConfigError("group.consumer.assignors", ",".join(assignors),
                              "uniform, range (or their Kafka class names)")
        self.migration_policy = migration_policy.lower()
        self.classic_max_size = classic_max_size
        self.enabled = enabled

    def timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a group, in ms."""
        if self.group_overrides is None:
            return self.session_timeout_ms, self.heartbeat_interval_ms
        return self.group_overrides(group_id, self.session_timeout_ms,
                                    self.heartbeat_interval_ms)

    @classmethod
    def from_kafka_config(cls, config) -> ConsumerGroupConfig:
        """Raises ConfigError (startup stops naming the key) for a session timeout or
        heartbeat interval outside its min/max, as Kafka's GroupCoordinatorConfig."""
        for name in ("session.timeout.ms", "heartbeat.interval.ms"):
            key = f"group.consumer.{name}"
            lo = config.get(f"group.consumer.min.{name}")
            hi = config.get(f"group.consumer.max.{name}")
            if not lo <= config.get(key) <= hi:
                raise ConfigError(key, config.get(key), f"in [{lo},...,{hi}] "
                                  f"(group.consumer.min/max.{name})")
        protocols = [p.lower() for p in config.get("group.coordinator.rebalance.protocols")]
        return cls(session_timeout_ms=config.get("group.consumer.session.timeout.ms"),
                   heartbeat_interval_ms=config.get("group.consumer.heartbeat.interval.ms"),
                   max_size=config.get("group.consumer.max.size"),
                   assignors=tuple(config.get("group.consumer.assignors")),
                   migration_policy=config.get("group.consumer.migration.policy"),
                   classic_max_size=config.get("group.max.size"),
                   enabled="consumer" in protocols)

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")


class TopicView:
    """The cluster's topics as the coordinator sees them: ``lookup(name) -> (id, count) |
    None``, ``name_of(id)``, ``names()``. Built over a MetadataCache, or a dict in tests."""

    def __init__(self, cache=None, topics: dict[str, tuple[uuid.UUID, int]] | None = None):
        self.cache = cache
        self.topics = topics

    def lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        if self.topics is not None:
            return self.topics.get(name)
        n = self.cache.num_partitions(name)
        tid = self.cache.topic_id(name)
        return None if n is None or tid is None else (tid, n)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        if self.topics is not None:
            return next((n for n, (t, _) in self.topics.items() if t == topic_id), None)
        return self.cache.topic_name(topic_id)

    def names(self):
        return list(self.topics) if self.topics is not None else self.cache.all_topics()


class HeartbeatResult:
    __slots__ = ("error", "message", "member_id", "member_epoch", "heartbeat_interval_ms",
                 "assignment")

    def __init__(self, error=E.NONE, message=None, member_id=None, member_epoch=0,
                 heartbeat_interval_ms=0, assignment=None) -> None:
        self.error = error
        self.message = message
        self.member_id = member_id
        self.member_epoch = member_epoch
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.assignment = assignment  # {topic_id: frozenset} or None = unchanged

    def __repr__(self) -> str:
        return (f"HeartbeatResult({self.error.name}, {self.message!r}, member={self.member_id}, "
                f"epoch={self.member_epoch}, assignment={self.assignment})")


class _Fail(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _encode_assignment(assigned: dict, topics: TopicView) -> bytes:
    A = ConsumerProtocolAssignment
    parts = []
    for tid, ps in sorted(assigned.items(), key=str):
        name = topics.name_of(tid)
        if name is not None and ps:
            parts.append(A.TopicPartition(topic=name, partitions=sorted(ps)))
    return struct.pack(">h", 3) + A(assigned_partitions=parts, user_data=None).encode(3)


def _decode_subscription(metadata: bytes):
    buf = bytes(metadata)
    (version,) = struct.unpack_from(">h", buf, 0)
    return ConsumerProtocolSubscription.decode(
        buf[2:], min(max(version, 0), ConsumerProtocolSubscription.max_version))


def _decode_assignment(data: bytes):
    buf = bytes(data)
    if len(buf) < 2:
        return None
    (version,) = struct.unpack_from(">h", buf, 0)
    return ConsumerProtocolAssignment.decode(
        buf[2:], min(max(version, 0), ConsumerProtocolAssignment.max_version))


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
                raise _Fail(E.INVALID_REGULAR_EXPRESSION,
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
        if not records:
            return E.NONE
        err = await self.coordinator.store.append(self.coordinator.partition_for(group_id),
                                                  records)
        if err in (E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE):
            return E.UNKNOWN_SERVER_ERROR
        return err

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
        await self._maybe_downgrade(group)

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
        except _Fail as f:
            return HeartbeatResult(f.error, f.message)

    def _validate(self, group_id, member_id, epoch, instance_id, rebalance_timeout_ms, names,
                  regex, assignor, owned, version) -> None:
        def bad(msg: str) -> _Fail:
            return _Fail(E.INVALID_REQUEST, msg)

        if not self.config.enabled:
            raise _Fail(E.UNSUPPORTED_VERSION, "The consumer rebalance protocol is disabled "
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
        if assignor is not None and _ASSIGNOR_CLASSES.get(assignor, assignor) \
                not in self.config.assignors:
            raise _Fail(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. "
                        f"Supported assignors: {', '.join(self.config.assignors)}.")
        if regex is not None:
            self._compile(regex)

    def _group_for_join(self, group_id: str, create: bool, records: list) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        share = self.coordinator.share
        if share is not None and group_id in share.groups:
            raise _Fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        classic = self.coordinator.groups.get(group_id)
        if classic is not None and not classic.is_state(GroupState.DEAD):
            if not create:
                raise _Fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            if classic.is_state(GroupState.EMPTY):
                return self._adopt_empty_classic(classic, records)
            if not self._upgradable(classic):
                raise _Fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            return self._convert_from_classic(classic, records)
        if not create:
            raise _Fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
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
        bump = old is None and not replaced or _subscription_changed(base, new)
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
        """The member the request is about (None = a new one); raises _Fail."""
        if instance_id is not None:
            held = group.member_by_instance(instance_id)
            if epoch == 0:
                if held is None or held.member_id == member_id:
                    return held
                if held.member_epoch != STATIC_LEAVE_EPOCH:
                    raise _Fail(E.UNRELEASED_INSTANCE_ID,
                                f"Static member {held.member_id} with instance id "
                                f"{instance_id} is not released yet.")
                return held  # replaced by the new member id
            if held is None or held.member_id != member_id:
                raise _Fail(E.FENCED_INSTANCE_ID if held is not None else E.UNKNOWN_MEMBER_ID,
                            f"Static member {member_id} with instance id {instance_id} is "
                            f"not known or was replaced.")
        member = group.members.get(member_id)
        if epoch == 0:
            if member is None and group.size >= self.config.max_size:
                raise _Fail(E.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its "
                            f"maximum capacity of {self.config.max_size} members.")
            return member
        if member is None:
            raise _Fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                                             f"{group.group_id}.")
        if member.uses_classic_protocol:
            raise _Fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} uses the classic protocol.")
        if epoch > member.member_epoch or (
                epoch < member.member_epoch and (epoch != member.previous_member_epoch
                                                 or not is_subset(owned, member.assigned))):
            raise _Fail(E.FENCED_MEMBER_EPOCH,
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
            raise _Fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        member = group.members.get(member_id)
        if member is None and instance_id is not None:
            member = group.member_by_instance(instance_id)
            if member is not None and member.member_id != member_id:
                raise _Fail(E.FENCED_INSTANCE_ID, f"Static member {instance_id} was replaced.")
        if member is None:
            raise _Fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
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
            await self._maybe_downgrade(group)
        return HeartbeatResult(E.NONE, None, member.member_id, epoch, 0, None)

    # --- classic members inside a consumer group (KIP-848 migration) -------------------------
    def _upgradable(self, classic: GroupMetadata) -> bool:
        return (self.config.upgrade_enabled and classic.protocol_type == "consumer"
                and classic.size <= self.config.max_size)

    def _adopt_empty_classic(self, classic: GroupMetadata, records: list) -> ConsumerGroup:
        """An Empty classic group becomes a consumer group; its offsets stay."""
        group = ConsumerGroup(classic.group_id, self.time_ms)
        group.offsets = classic.offsets
        group.pending_offset_commits = classic.pending_offset_commits
        group.pending_txn_offsets = classic.pending_txn_offsets
        self.coordinator.groups.pop(classic.group_id, None)
        self.groups[classic.group_id] = group
        if classic.protocol_type is not None:
            records.append(group_tombstone(classic.group_id))
        return group

    def _convert_from_classic(self, classic: GroupMetadata, records: list) -> ConsumerGroup:
        """Online upgrade (Kafka's ConsumerGroup.fromClassicGroup): each classic member keeps
        its assignment at epoch = the generation and goes on as a classic member."""
        gid = classic.group_id
        coord = self.coordinator
        coord._fail_waiters(classic, E.REBALANCE_IN_PROGRESS)
        group = ConsumerGroup(gid, self.time_ms)
        group.offsets = classic.offsets
        group.pending_offset_commits = classic.pending_offset_commits
        group.pending_txn_offsets = classic.pending_txn_offsets
        gen = classic.generation_id
        records.append(group_tombstone(gid))
        for m in classic.members.values():
            try:
                sub = _decode_subscription(m.metadata(classic.protocol_name))
                asg = _decode_assignment(m.assignment)
            except Exception as e:  # noqa: BLE001 - a malformed embedded protocol
                raise _Fail(E.GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {gid}: "
                                                  f"{e}.") from None
            assigned: dict = {}
            for tp in (asg.assigned_partitions if asg is not None else ()):
                found = self.topics.lookup(tp.topic)
                if found is not None and tp.partitions:
                    assigned[found[0]] = frozenset(tp.partitions)
            cm = ConsumerGroupMember(
                member_id=m.member_id, instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscribed_topic_names=tuple(t for t in sub.topics if t is not None),
                rack_id=getattr(sub, "rack_id", None), member_epoch=gen,
                previous_member_epoch=gen, assigned=assigned,
                classic=ClassicMemberMetadata(m.session_timeout_ms,
                                              tuple(m.supported_protocols)))
            group.update_member(cm)
            group.target[cm.member_id] = assigned
        group.group_epoch = group.assignment_epoch = gen
        group.subscription_metadata = self._subscription_metadata(group)
        records.append(subscription_metadata_record(gid, group.subscription_metadata))
        records.append(epoch_record(gid, gen))
        for cm in group.members.values():
            records.append(member_metadata_record(gid, cm))
            records.append(target_member_record(gid, cm.member_id, cm.assigned))
        records.append(target_assignment_epoch_record(gid, gen))
        for cm in group.members.values():
            records.append(current_assignment_record(gid, cm))
        for mid in list(classic.members):
            self._schedule_session(gid, mid, group.members[mid].classic.session_timeout_ms)
        classic.state = GroupState.DEAD
        classic.members.clear()
        coord.groups.pop(gid, None)
        self.groups[gid] = group
        group.note_state()
        log.info("[GroupId %s] Converted the classic group to a consumer group (online "
                 "upgrade, %d members).", gid, group.size)
        return group

    async def _maybe_downgrade(self, group: ConsumerGroup) -> None:
        """Online downgrade: only classic members remain -> a classic group that rebalances."""
        if not group.members or not group.all_use_classic_except("") or \
                not self.config.downgrade_enabled or \
                group.size > self.config.classic_max_size or \
                self.groups.get(group.group_id) is not group:
            return
        coord = self.coordinator
        gid = group.group_id
        classic = GroupMetadata(gid, GroupState.EMPTY, self.time_ms)
        classic.offsets = group.offsets
        classic.pending_offset_commits = group.pending_offset_commits
        classic.pending_txn_offsets = group.pending_txn_offsets
        classic.protocol_type = "consumer"
        classic.generation_id = group.group_epoch
        protocols = None
        for cm in group.members.values():
            names = [n for n, _ in cm.classic.supported_protocols]
            protocols = set(names) if protocols is None else protocols & set(names)
        first = next(iter(group.members.values()))
        classic.protocol_name = next((n for n, _ in first.classic.supported_protocols
                                      if n in (protocols or ())), None)
        for cm in group.members.values():
            mm = MemberMetadata(cm.member_id, cm.instance_id, cm.client_id, cm.client_host,
                                cm.rebalance_timeout_ms if cm.rebalance_timeout_ms > 0
                                else cm.classic.session_timeout_ms,
                                cm.classic.session_timeout_ms, "consumer",
                                list(cm.classic.supported_protocols))
            mm.assignment = _encode_assignment(cm.assigned, self.topics)
            classic.members[cm.member_id] = mm
            for name in mm.protocols():
                classic.supported_protocols[name] = classic.supported_protocols.get(name, 0) + 1
            if cm.instance_id is not None:
                classic.static_members[cm.instance_id] = cm.member_id
            self._cancel_timers(gid, cm.member_id)
        classic.leader_id = next(iter(classic.members))
        classic.state = GroupState.STABLE
        records = group_tombstones(group)
        records.append(group_metadata_record(classic))
        group.dead = True
        del self.groups[gid]
        coord.groups[gid] = classic
        log.info("[GroupId %s] Converted the consumer group to a classic group (online "
                 "downgrade, %d members).", gid, classic.size)
        for mm in classic.members.values():
            coord._complete_and_schedule_heartbeat(classic, mm)
        coord._prepare_rebalance(classic, f"Downgrade group {gid} from consumer to classic.")
        await self._append(gid, records)

    async def classic_join(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                           require_known_member_id: bool, client_id: str, client_host: str,
                           rebalance_timeout_ms: int, session_timeout_ms: int,
                           protocol_type: str, protocols: list[tuple[str, bytes]]) -> JoinResult:
        """JoinGroup of a classic member into a consumer group (answered at once)."""
        gid = group.group_id
        if protocol_type != "consumer" or not protocols:
            return JoinResult(int(E.INCONSISTENT_GROUP_PROTOCOL), member_id)
        unknown = not member_id
        if unknown:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if require_known_member_id and instance_id is None:
                return JoinResult(int(E.MEMBER_ID_REQUIRED), member_id)
        try:
            sub = _decode_subscription(protocols[0][1])
        except Exception:  # noqa: BLE001 - malformed subscription bytes
            return JoinResult(int(E.INCONSISTENT_GROUP_PROTOCOL), member_id)
        records: list = []
        old = group.members.get(member_id)
        if old is None and instance_id is not None:
            held = group.member_by_instance(instance_id)
            if held is not None:
                old = held
        if old is None:
            if not unknown:
                return JoinResult(int(E.UNKNOWN_MEMBER_ID), member_id)
            if group.size >= self.config.max_size:
                return JoinResult(int(E.GROUP_MAX_SIZE_REACHED), member_id)
        base = old if old is not None else ConsumerGroupMember(member_id)
        replaced = old is not None and old.member_id != member_id
        if replaced:
            self._replace_static(group, old.member_id, member_id, records)
            base = replace(old, member_id=member_id)
        new = replace(base, instance_id=instance_id, client_id=client_id,
                      client_host=client_host, rebalance_timeout_ms=rebalance_timeout_ms,
                      rack_id=getattr(sub, "rack_id", None) or base.rack_id,
                      subscribed_topic_names=tuple(t for t in sub.topics if t is not None),
                      subscribed_topic_regex=None, server_assignor=None,
                      classic=ClassicMemberMetadata(session_timeout_ms, tuple(protocols)))
        bump = old is None or _subscription_changed(base, new)
        group.update_member(new)
        self._refresh_and_assign(group, bump, records)
        owned: dict = {}
        for tp in getattr(sub, "owned_partitions", None) or ():
            found = self.topics.lookup(tp.topic)
            if found is not None and tp.partitions:
                owned[found[0]] = frozenset(tp.partitions)
        reconciled = self._reconcile(group, new, owned)
        self._store(group, None if (old is None or replaced) else old, reconciled, records)
        group.note_state()
        self._schedule_session(gid, member_id, session_timeout_ms)
        err = await self._append(gid, records)
        if err != E.NONE:
            return JoinResult(int(err), member_id)
        return JoinResult(0, member_id, reconciled.member_epoch, "consumer", protocols[0][0],
                          "", [])

    def classic_sync(self, group: ConsumerGroup, generation_id: int, member_id: str,
                     protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        m = group.members.get(member_id)
        if m is None or not m.uses_classic_protocol:
            return SyncResult(int(E.UNKNOWN_MEMBER_ID))
        if generation_id != m.member_epoch:
            return SyncResult(int(E.ILLEGAL_GENERATION))
        names = [n for n, _ in m.classic.supported_protocols]
        if (protocol_type is not None and protocol_type != "consumer") or \
                (protocol_name is not None and protocol_name not in names):
            return SyncResult(int(E.INCONSISTENT_GROUP_PROTOCOL))
        return SyncResult(0, "consumer", protocol_name or names[0],
                          _encode_assignment(m.assigned, self.topics))

    def classic_heartbeat(self, group: ConsumerGroup, member_id: str, generation_id: int
                          ) -> ErrorCode:
        m = group.members.get(member_id)
        if m is None or not m.uses_classic_protocol:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != m.member_epoch:
            return E.ILLEGAL_GENERATION
        self._schedule_session(group.group_id, member_id, m.classic.session_timeout_ms)
        if m.state is not MemberState.STABLE or m.member_epoch != group.assignment_epoch or \
                group.group_epoch > group.assignment_epoch:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def classic_leave(self, group: ConsumerGroup, leaving: list[tuple[str, str | None]]
                      ) -> list[ErrorCode]:
        out = []
        records: list = []
        for member_id, instance_id in leaving:
            m = group.members.get(member_id) if member_id else \
                group.member_by_instance(instance_id)
            if m is None:
                out.append(E.UNKNOWN_MEMBER_ID)
                continue
            if instance_id is not None and m.instance_id != instance_id:
                out.append(E.FENCED_INSTANCE_ID)
                continue
            records += self._remove_member(group, m.member_id)
            out.append(E.NONE)
        if records:
            self.coordinator._spawn(self._append_after_fence(group, records))
        return out

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
        except _Fail:
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


def _subscription_changed(a: ConsumerGroupMember, b: ConsumerGroupMember) -> bool:
    return (a.subscribed_topic_names != b.subscribed_topic_names
            or a.subscribed_topic_regex != b.subscribed_topic_regex
            or a.server_assignor != b.server_assignor or a.rack_id != b.rack_id)


def _metadata_changed(a: ConsumerGroupMember, b: ConsumerGroupMember) -> bool:
    return (a.instance_id, a.rack_id, a.client_id, a.client_host, a.rebalance_timeout_ms,
            a.subscribed_topic_names, a.subscribed_topic_regex, a.server_assignor,
            a.classic) != (b.instance_id, b.rack_id, b.client_id, b.client_host,
                           b.rebalance_timeout_ms, b.subscribed_topic_names,
                           b.subscribed_topic_regex, b.server_assignor, b.classic)
