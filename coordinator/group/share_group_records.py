"""Share group records in ``__consumer_offsets`` (Kafka 4.2's coordinator-records) and their replay.

Record types (key version = record type, values version 0):

- 10 ``ShareGroupMemberMetadata`` (group, member) -> rack, client id/host, subscribed names.
- 11 ``ShareGroupMetadata`` (group) -> group epoch and metadata hash; its tombstone is the
  last record of a deleted group.
- 12 ``ShareGroupTargetAssignmentMetadata`` (group) -> assignment epoch.
- 13 ``ShareGroupTargetAssignmentMember`` (group, member) -> target partitions.
- 14 ``ShareGroupCurrentMemberAssignment`` (group, member) -> member epoch, previous epoch,
  state (0 stable), assigned partitions.
- 15 ``ShareGroupStatePartitionMetadata`` (group) -> initialized topics (id, name, partitions)
  whose share state lives in ``__share_group_state``; Josef writes no initializing or
  deleting topics (a share-partition leader initializes its own state on first use).

A member leaves with tombstones of 14, 13 then 10 (Kafka's order); a group is deleted with
its members' tombstones, then 12, 15 and 11. ``ShareGroupReplay`` rebuilds ``ShareGroup``
objects from these records in log order.
"""

from __future__ import annotations

import uuid

from coordinator.group.consumer_records import _key, _target_member, _topics_in, _topics_out
from coordinator.group.share_group import Assignment, ShareGroup, ShareGroupMember
from protocol.coordinator_records import decode_group_key, decode_value, encode_value
from protocol.messages import MESSAGES

__all__ = ["SHARE_RECORD_TYPES", "ShareGroupReplay", "current_assignment_record", "epoch_record",
           "group_tombstones", "member_metadata_record", "member_tombstones",
           "state_partition_record", "target_epoch_record", "target_member_record"]

_M = MESSAGES
MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA = 10, 11, 12
TARGET_MEMBER, CURRENT_ASSIGNMENT, STATE_PARTITION_METADATA = 13, 14, 15
SHARE_RECORD_TYPES = frozenset(range(10, 16))
Record = tuple[bytes, bytes | None]


def epoch_record(group_id: str, epoch: int, metadata_hash: int = 0) -> Record:
    return (_key("ShareGroupMetadataKey", GROUP_METADATA, group_id=group_id),
            encode_value(_M["ShareGroupMetadataValue"](epoch=epoch, metadata_hash=metadata_hash),
                         0))


def member_metadata_record(group_id: str, m: ShareGroupMember) -> Record:
    V = _M["ShareGroupMemberMetadataValue"]
    return (_key("ShareGroupMemberMetadataKey", MEMBER_METADATA, group_id=group_id,
                 member_id=m.member_id),
            encode_value(V(rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                           subscribed_topic_names=list(m.subscribed_topic_names)), 0))


def target_epoch_record(group_id: str, epoch: int) -> Record:
    return (_key("ShareGroupTargetAssignmentMetadataKey", TARGET_METADATA, group_id=group_id),
            encode_value(_M["ShareGroupTargetAssignmentMetadataValue"](assignment_epoch=epoch), 0))


def target_member_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    return _target_member("ShareGroup", TARGET_MEMBER, group_id, member_id, assignment)


def current_assignment_record(group_id: str, m: ShareGroupMember) -> Record:
    V = _M["ShareGroupCurrentMemberAssignmentValue"]
    return (_key("ShareGroupCurrentMemberAssignmentKey", CURRENT_ASSIGNMENT, group_id=group_id,
                 member_id=m.member_id),
            encode_value(V(member_epoch=m.member_epoch,
                           previous_member_epoch=m.previous_member_epoch, state=0,
                           assigned_partitions=_topics_out(V.TopicPartitions, m.assigned)), 0))


def state_partition_record(group_id: str, initialized: dict[uuid.UUID, tuple[str, frozenset[int]]]
                           ) -> Record:
    V = _M["ShareGroupStatePartitionMetadataValue"]
    return (_key("ShareGroupStatePartitionMetadataKey", STATE_PARTITION_METADATA,
                 group_id=group_id),
            encode_value(V(initializing_topics=[], deleting_topics=[], initialized_topics=[
                V.TopicPartitionsInfo(topic_id=tid, topic_name=name, partitions=sorted(ps))
                for tid, (name, ps) in sorted(initialized.items(), key=str)]), 0))


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    return [(_key(name, version, group_id=group_id, member_id=member_id), None)
            for name, version in (("ShareGroupCurrentMemberAssignmentKey", CURRENT_ASSIGNMENT),
                                  ("ShareGroupTargetAssignmentMemberKey", TARGET_MEMBER),
                                  ("ShareGroupMemberMetadataKey", MEMBER_METADATA))]


def group_tombstones(group: ShareGroup) -> list[Record]:
    out: list[Record] = []
    for mid in sorted(set(group.members) | set(group.target)):
        out.extend(member_tombstones(group.group_id, mid))
    gid = group.group_id
    out += [(_key("ShareGroupTargetAssignmentMetadataKey", TARGET_METADATA, group_id=gid), None),
            (_key("ShareGroupStatePartitionMetadataKey", STATE_PARTITION_METADATA,
                  group_id=gid), None),
            (_key("ShareGroupMetadataKey", GROUP_METADATA, group_id=gid), None)]
    return out


class ShareGroupReplay:
    """Collects share group records of one partition in log order; ``groups()`` builds the
    groups that exist at the end (members without metadata are dropped)."""

    def __init__(self) -> None:
        self._groups: dict[str, dict] = {}

    def _g(self, gid: str) -> dict:
        return self._groups.setdefault(gid, {"epoch": None, "hash": 0, "assign_epoch": 0,
                                             "members": {}, "target": {}, "current": {},
                                             "initialized": {}})

    def add(self, key, value) -> bool:
        """Replay one record; False if it is not a share group record."""
        k, version = decode_group_key(key)
        if version not in SHARE_RECORD_TYPES:
            return False
        gid = k.group_id
        if version == GROUP_METADATA and value is None:
            self._groups.pop(gid, None)
            return True
        g = self._g(gid)
        v = decode_value(type(k), value)[0] if value is not None else None
        if version == GROUP_METADATA:
            g["epoch"], g["hash"] = v.epoch, v.metadata_hash
        elif version == TARGET_METADATA:
            g["assign_epoch"] = 0 if v is None else v.assignment_epoch
        elif version == STATE_PARTITION_METADATA:
            g["initialized"] = {} if v is None else {
                t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in v.initialized_topics}
        else:
            table = {MEMBER_METADATA: "members", TARGET_MEMBER: "target",
                     CURRENT_ASSIGNMENT: "current"}[version]
            if v is None:
                g[table].pop(k.member_id, None)
            elif version == TARGET_MEMBER:
                g[table][k.member_id] = _topics_in(v.topic_partitions)
            else:
                g[table][k.member_id] = v
        return True

    def groups(self) -> dict[str, ShareGroup]:
        out: dict[str, ShareGroup] = {}
        for gid, g in self._groups.items():
            if g["epoch"] is None:
                continue
            group = ShareGroup(gid)
            group.group_epoch = g["epoch"]
            group.metadata_hash = g["hash"]
            group.assignment_epoch = g["assign_epoch"]
            group.initialized = dict(g["initialized"])
            for mid, mv in g["members"].items():
                cur = g["current"].get(mid)
                group.members[mid] = ShareGroupMember(
                    member_id=mid, rack_id=mv.rack_id, client_id=mv.client_id or "",
                    client_host=mv.client_host or "",
                    subscribed_topic_names=tuple(mv.subscribed_topic_names or ()),
                    member_epoch=cur.member_epoch if cur else 0,
                    previous_member_epoch=cur.previous_member_epoch if cur else 0,
                    assigned=_topics_in(cur.assigned_partitions) if cur else {})
                if mid in g["target"]:
                    group.target[mid] = g["target"][mid]
            out[gid] = group
        return out
