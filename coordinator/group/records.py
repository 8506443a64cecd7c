"""Kafka's ``__consumer_offsets`` records for classic groups (coordinator-records specs).

Each record is a key and a value, both ``int16 version | body`` (protocol.coordinator_records):

- offset commit: key ``OffsetCommitKey`` version 1 (``group, topic, partition``; version 0
  is the same layout, read too); value ``OffsetCommitValue`` version 3 (``offset int64,
  leader_epoch int32, metadata string, commit_timestamp int64``), or version 1 (adds
  ``expire_timestamp int64``, no leader epoch) when an OffsetCommit v2-v4 asked for an
  explicit retention time. Null value = tombstone (the offset was deleted or expired).
- group metadata: key ``GroupMetadataKey`` version 2 (``group``); value
  ``GroupMetadataValue`` version 3 (``protocol_type, generation, protocol, leader,
  current_state_timestamp``, members with ``member_id, group_instance_id, client_id,
  client_host, rebalance_timeout, session_timeout, subscription, assignment``). Null value
  = tombstone (the group was deleted).

Keys with versions 3+ (KIP-848 consumer groups) are skipped when loading.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.group.group import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata
from protocol.coordinator_records import decode_group_key, decode_value, encode_key, encode_value
from protocol.messages import MESSAGES

__all__ = [
    "GROUP_METADATA_TOPIC",
    "GroupRecord",
    "OffsetRecord",
    "decode_record",
    "group_metadata_record",
    "group_tombstone",
    "offset_commit_record",
    "offset_tombstone",
    "group_from_value",
]

#: the internal topic these records live in (Kafka's Topic.GROUP_METADATA_TOPIC_NAME)
GROUP_METADATA_TOPIC = "__consumer_offsets"

OffsetCommitKey = MESSAGES["OffsetCommitKey"]
OffsetCommitValue = MESSAGES["OffsetCommitValue"]
GroupMetadataKey = MESSAGES["GroupMetadataKey"]
GroupMetadataValue = MESSAGES["GroupMetadataValue"]
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRE = 1
GROUP_VALUE_VERSION = 3


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return encode_key(OffsetCommitKey(group=group_id, topic=topic, partition=partition),
                      OFFSET_KEY_VERSION)


def offset_commit_record(group_id: str, topic: str, partition: int,
                         om: OffsetAndMetadata) -> tuple[bytes, bytes]:
    if om.expire_timestamp >= 0:
        value = OffsetCommitValue(offset=om.offset, metadata=om.metadata or "",
                                  commit_timestamp=om.commit_timestamp,
                                  expire_timestamp=om.expire_timestamp)
        version = OFFSET_VALUE_VERSION_WITH_EXPIRE
    else:
        value = OffsetCommitValue(offset=om.offset, leader_epoch=om.leader_epoch,
                                  metadata=om.metadata or "",
                                  commit_timestamp=om.commit_timestamp)
        version = OFFSET_VALUE_VERSION
    return offset_key(group_id, topic, partition), encode_value(value, version)


def offset_tombstone(group_id: str, topic: str, partition: int) -> tuple[bytes, None]:
    return offset_key(group_id, topic, partition), None


def group_key(group_id: str) -> bytes:
    return encode_key(GroupMetadataKey(group=group_id), GROUP_KEY_VERSION)


def group_metadata_record(group: GroupMetadata,
                          assignment: dict[str, bytes] | None = None) -> tuple[bytes, bytes]:
    """The group as stored after a generation formed (``assignment``: member id -> bytes,
    default each member's current assignment)."""
    members = []
    protocol = group.protocol_name
    for m in group.members.values():
        members.append(GroupMetadataValue.MemberMetadata(
            member_id=m.member_id, group_instance_id=m.group_instance_id,
            client_id=m.client_id, client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
            subscription=m.metadata(protocol) if protocol is not None else b"",
            assignment=(assignment or {}).get(m.member_id, m.assignment)))
    value = GroupMetadataValue(
        protocol_type=group.protocol_type or "", generation=group.generation_id,
        protocol=protocol, leader=group.leader_id if members else None,
        current_state_timestamp=group.current_state_timestamp, members=members)
    return group_key(group.group_id), encode_value(value, GROUP_VALUE_VERSION)


def group_tombstone(group_id: str) -> tuple[bytes, None]:
    return group_key(group_id), None


@dataclass(slots=True)
class OffsetRecord:
    group_id: str
    topic: str
    partition: int
    value: OffsetAndMetadata | None  # None = tombstone


@dataclass(slots=True)
class GroupRecord:
    group_id: str
    value: object | None  # GroupMetadataValue; None = tombstone


def decode_record(key: bytes | memoryview | None,
                  value: bytes | memoryview | None) -> OffsetRecord | GroupRecord | None:
    """One ``__consumer_offsets`` record -> OffsetRecord / GroupRecord, or None for record
    types a classic coordinator ignores. Malformed bytes raise the codec's ProtocolError."""
    if key is None:
        return None
    k, version = decode_group_key(key)
    if version in (0, 1):
        if value is None:
            return OffsetRecord(k.group, k.topic, k.partition, None)
        v, vv = decode_value(type(k), value)
        return OffsetRecord(k.group, k.topic, k.partition, OffsetAndMetadata(
            offset=v.offset, leader_epoch=v.leader_epoch if vv >= 3 else -1,
            metadata=v.metadata or "", commit_timestamp=v.commit_timestamp,
            expire_timestamp=v.expire_timestamp if vv == 1 else -1))
    if version == 2:
        if value is None:
            return GroupRecord(k.group, None)
        v, _ = decode_value(type(k), value)
        return GroupRecord(k.group, v)
    return None


def group_from_value(group_id: str, value, now_ms) -> GroupMetadata:
    """Rebuild a loaded group: Empty without members, else Stable with the stored
    generation, leader, protocol, members and assignments."""
    members = list(value.members)
    group = GroupMetadata(group_id, GroupState.STABLE if members else GroupState.EMPTY, now_ms)
    group.protocol_type = value.protocol_type or None
    group.generation_id = value.generation
    group.protocol_name = value.protocol
    group.leader_id = value.leader
    if value.current_state_timestamp is not None and value.current_state_timestamp >= 0:
        group.current_state_timestamp = value.current_state_timestamp
    for mv in members:
        m = MemberMetadata(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host,
                           mv.rebalance_timeout if mv.rebalance_timeout >= 0
                           else mv.session_timeout, mv.session_timeout,
                           group.protocol_type or "",
                           [(value.protocol or "", bytes(mv.subscription))])
        m.assignment = bytes(mv.assignment)
        group.members[m.member_id] = m
        for name in m.protocols():
            group.supported_protocols[name] = group.supported_protocols.get(name, 0) + 1
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    if group.leader_id not in group.members:
        group.leader_id = next(iter(group.members), None)
    return group
