"""Classic members inside KIP-848 consumer groups, and the online conversions between a
classic group and a consumer group (Kafka's GroupMetadataManager, migration part, 4.0).

Classic members (KIP-848 migration, Kafka 4.0): JoinGroup/SyncGroup/Heartbeat/LeaveGroup
for a consumer group are served here (``classic_join`` ...): the subscription comes from
the consumer protocol metadata, the JoinGroup answers at once with generation = member
epoch and no leader, SyncGroup returns the member's current assignment, Heartbeat answers
REBALANCE_IN_PROGRESS while the member is not Stable at the assignment epoch (it rejoins,
reporting its owned partitions). When the last consumer-protocol member leaves and only
classic members remain, the group turns back into a classic group and rebalances (if the
policy allows downgrades).

Upgrade (``convert_from_classic``, Kafka's ConsumerGroup.fromClassicGroup): each classic
member keeps its assignment at member epoch = the generation and goes on as a classic member;
a member's embedded protocol that does not parse -> GROUP_ID_NOT_FOUND. An Empty classic group
is adopted at once (``adopt_empty_classic``), its offsets kept.

The consumer-protocol bytes (``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``:
an int16 version, then the message) are decoded and encoded here.
"""

from __future__ import annotations

import logging
import struct
import uuid
from dataclasses import replace

from coordinator.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    subscription_changed,
)
from coordinator.group.consumer_records import (
    current_assignment_record,
    epoch_record,
    group_tombstones,
    member_metadata_record,
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
from coordinator.group.heartbeat_common import HeartbeatError, TopicView
from coordinator.group.records import group_metadata_record, group_tombstone
from protocol.errors import ErrorCode
from protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = ["ClassicMigration", "decode_assignment", "decode_subscription", "encode_assignment"]

log = logging.getLogger(__name__)
E = ErrorCode


def encode_assignment(assigned: dict, topics: TopicView) -> bytes:
    A = ConsumerProtocolAssignment
    parts = []
    for tid, ps in sorted(assigned.items(), key=str):
        name = topics.name_of(tid)
        if name is not None and ps:
            parts.append(A.TopicPartition(topic=name, partitions=sorted(ps)))
    return struct.pack(">h", 3) + A(assigned_partitions=parts, user_data=None).encode(3)


def decode_subscription(metadata: bytes):
    buf = bytes(metadata)
    (version,) = struct.unpack_from(">h", buf, 0)
    return ConsumerProtocolSubscription.decode(
        buf[2:], min(max(version, 0), ConsumerProtocolSubscription.max_version))


def decode_assignment(data: bytes):
    buf = bytes(data)
    if len(buf) < 2:
        return None
    (version,) = struct.unpack_from(">h", buf, 0)
    return ConsumerProtocolAssignment.decode(
        buf[2:], min(max(version, 0), ConsumerProtocolAssignment.max_version))


class ClassicMigration:
    """The classic side of a consumer-group coordinator (``consumer``: the
    ``ConsumerGroupCoordinator`` whose groups, timers, records and assignor it uses)."""

    def __init__(self, consumer) -> None:
        self.consumer = consumer

    @property
    def config(self):
        return self.consumer.config

    @property
    def topics(self) -> TopicView:
        return self.consumer.topics

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.consumer.groups

    @property
    def coordinator(self):
        return self.consumer.coordinator

    @property
    def time_ms(self):
        return self.consumer.coordinator.time_ms

    def upgradable(self, classic: GroupMetadata) -> bool:
        return (self.config.upgrade_enabled and classic.protocol_type == "consumer"
                and classic.size <= self.config.max_size)

    def adopt_empty_classic(self, classic: GroupMetadata, records: list) -> ConsumerGroup:
        """An Empty classic group becomes a consumer group; its offsets stay."""
        group = ConsumerGroup(classic.group_id, self.time_ms)
        group.take_offsets(classic)
        self.coordinator.groups.pop(classic.group_id, None)
        self.groups[classic.group_id] = group
        if classic.protocol_type is not None:
            records.append(group_tombstone(classic.group_id))
        return group

    def convert_from_classic(self, classic: GroupMetadata, records: list) -> ConsumerGroup:
        """Online upgrade (Kafka's ConsumerGroup.fromClassicGroup): each classic member keeps
        its assignment at epoch = the generation and goes on as a classic member."""
        gid = classic.group_id
        coord = self.coordinator
        coord._fail_waiters(classic, E.REBALANCE_IN_PROGRESS)
        group = ConsumerGroup(gid, self.time_ms)
        group.take_offsets(classic)
        gen = classic.generation_id
        records.append(group_tombstone(gid))
        for m in classic.members.values():
            try:
                sub = decode_subscription(m.metadata(classic.protocol_name))
                asg = decode_assignment(m.assignment)
            except Exception as e:  # noqa: BLE001 - a malformed embedded protocol
                raise HeartbeatError(
                    E.GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {gid}: "
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
        group.subscription_metadata = self.consumer._subscription_metadata(group)
        records.append(subscription_metadata_record(gid, group.subscription_metadata))
        records.append(epoch_record(gid, gen))
        for cm in group.members.values():
            records.append(member_metadata_record(gid, cm))
            records.append(target_member_record(gid, cm.member_id, cm.assigned))
        records.append(target_assignment_epoch_record(gid, gen))
        for cm in group.members.values():
            records.append(current_assignment_record(gid, cm))
        for mid in list(classic.members):
            self.consumer._schedule_session(gid, mid, group.members[mid].classic.session_timeout_ms)
        classic.state = GroupState.DEAD
        classic.members.clear()
        coord.groups.pop(gid, None)
        self.groups[gid] = group
        group.note_state()
        log.info("[GroupId %s] Converted the classic group to a consumer group (online "
                 "upgrade, %d members).", gid, group.size)
        return group

    async def maybe_downgrade(self, group: ConsumerGroup) -> None:
        """Online downgrade: only classic members remain -> a classic group that rebalances."""
        if not group.members or not group.all_use_classic_except("") or \
                not self.config.downgrade_enabled or \
                group.size > self.config.classic_max_size or \
                self.groups.get(group.group_id) is not group:
            return
        coord = self.coordinator
        gid = group.group_id
        classic = GroupMetadata(gid, GroupState.EMPTY, self.time_ms)
        classic.take_offsets(group)
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
            mm.assignment = encode_assignment(cm.assigned, self.topics)
            classic.members[cm.member_id] = mm
            for name in mm.protocols():
                classic.supported_protocols[name] = classic.supported_protocols.get(name, 0) + 1
            if cm.instance_id is not None:
                classic.static_members[cm.instance_id] = cm.member_id
            self.consumer._cancel_timers(gid, cm.member_id)
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
        await self.consumer._append(gid, records)

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
            sub = decode_subscription(protocols[0][1])
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
            self.consumer._replace_static(group, old.member_id, member_id, records)
            base = replace(old, member_id=member_id)
        new = replace(base, instance_id=instance_id, client_id=client_id,
                      client_host=client_host, rebalance_timeout_ms=rebalance_timeout_ms,
                      rack_id=getattr(sub, "rack_id", None) or base.rack_id,
                      subscribed_topic_names=tuple(t for t in sub.topics if t is not None),
                      subscribed_topic_regex=None, server_assignor=None,
                      classic=ClassicMemberMetadata(session_timeout_ms, tuple(protocols)))
        bump = old is None or subscription_changed(base, new)
        group.update_member(new)
        self.consumer._refresh_and_assign(group, bump, records)
        owned: dict = {}
        for tp in getattr(sub, "owned_partitions", None) or ():
            found = self.topics.lookup(tp.topic)
            if found is not None and tp.partitions:
                owned[found[0]] = frozenset(tp.partitions)
        reconciled = self.consumer._reconcile(group, new, owned)
        self.consumer._store(group, None if (old is None or replaced) else old, reconciled, records)
        group.note_state()
        self.consumer._schedule_session(gid, member_id, session_timeout_ms)
        err = await self.consumer._append(gid, records)
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
                          encode_assignment(m.assigned, self.topics))

    def classic_heartbeat(self, group: ConsumerGroup, member_id: str, generation_id: int
                          ) -> ErrorCode:
        m = group.members.get(member_id)
        if m is None or not m.uses_classic_protocol:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != m.member_epoch:
            return E.ILLEGAL_GENERATION
        self.consumer._schedule_session(group.group_id, member_id, m.classic.session_timeout_ms)
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
            records += self.consumer._remove_member(group, m.member_id)
            out.append(E.NONE)
        if records:
            self.coordinator._spawn(self.consumer._append_after_fence(group, records))
        return out
