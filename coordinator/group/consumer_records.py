"""KIP-848 consumer group records in ``__consumer_offsets`` and their replay on load.

Record types (key version, Kafka's coordinator-records specs), all values version 0:

- 3 ``ConsumerGroupMetadata`` (group) -> ``epoch``: the group epoch; its tombstone is the
  last record of a deleted group.
- 4 ``ConsumerGroupPartitionMetadata`` (group) -> the subscribed topics (id, name,
  partition count) the target assignment was computed for.
- 5 ``ConsumerGroupMemberMetadata`` (group, member) -> instance id, rack, client id/host,
  subscribed names/regex, rebalance timeout, server assignor, classic member metadata.
- 6 ``ConsumerGroupTargetAssignmentMetadata`` (group) -> ``assignment_epoch``.
- 7 ``ConsumerGroupTargetAssignmentMember`` (group, member) -> target partitions.
- 8 ``ConsumerGroupCurrentMemberAssignment`` (group, member) -> member epoch, previous
  epoch, state, assigned partitions, partitions pending revocation.

A member leaves with tombstones of 8, 7 then 5 (Kafka's order); a group is deleted with the
tombstones of its members' records, then 6, 4 and 3. ``ConsumerGroupReplay`` rebuilds
``ConsumerGroup`` objects from these records in log order.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from coordinator.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from protocol.coordinator_records import decode_group_key, decode_value, encode_key, encode_value
from protocol.messages import MESSAGES

__all__ = ["ConsumerGroupReplay", "current_assignment_record", "epoch_record",
           "group_tombstones", "member_metadata_record", "member_tombstones",
           "subscription_metadata_record", "target_assignment_epoch_record",
           "target_member_record"]

_M = MESSAGES
GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 6, 7, 8
Record = tuple[bytes, bytes | None]


def _key(name: str, version: int, **fields) -> bytes:
    return encode_key(_M[name](**fields), version)


def _topics_out(cls, a: dict) -> list:
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(a.items(), key=str) if ps]


def _topics_in(items) -> dict:
    return {t.topic_id: frozenset(t.partitions) for t in items if t.partitions}


def epoch_record(group_id: str, epoch: int) -> Record:
    return (_key("ConsumerGroupMetadataKey", GROUP_METADATA, group_id=group_id),
            encode_value(_M["ConsumerGroupMetadataValue"](epoch=epoch), 0))


def subscription_metadata_record(group_id: str, metadata: dict[str, tuple[uuid.UUID, int]]
                                 ) -> Record:
    V = _M["ConsumerGroupPartitionMetadataValue"]
    topics = [V.TopicMetadata(topic_id=tid, topic_name=name, num_partitions=n,
                              partition_metadata=[])
              for name, (tid, n) in sorted(metadata.items())]
    return (_key("ConsumerGroupPartitionMetadataKey", PARTITION_METADATA, group_id=group_id),
            encode_value(V(topics=topics), 0))


def member_metadata_record(group_id: str, m: ConsumerGroupMember) -> Record:
    V = _M["ConsumerGroupMemberMetadataValue"]
    classic = None
    if m.classic is not None:
        classic = V.ClassicMemberMetadata(
            session_timeout_ms=m.classic.session_timeout_ms,
            supported_protocols=[V.ClassicProtocol(name=n, metadata=md)
                                 for n, md in m.classic.supported_protocols])
    value = V(instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
              client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
              subscribed_topic_regex=m.subscribed_topic_regex,
              rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
              classic_member_metadata=classic)
    return (_key("ConsumerGroupMemberMetadataKey", MEMBER_METADATA, group_id=group_id,
                 member_id=m.member_id), encode_value(value, 0))


def target_assignment_epoch_record(group_id: str, epoch: int) -> Record:
    return (_key("ConsumerGroupTargetAssignmentMetadataKey", TARGET_METADATA, group_id=group_id),
            encode_value(_M["ConsumerGroupTargetAssignmentMetadataValue"](
                assignment_epoch=epoch), 0))


def _target_member(kind: str, version: int, group_id: str, member_id: str,
                   assignment: dict) -> Record:
    """A ``<kind>TargetAssignmentMember`` record (``kind`` "ConsumerGroup" or "ShareGroup";
    ``version`` its key version): the member's target ``{topic_id: partitions}``."""
    V = _M[f"{kind}TargetAssignmentMemberValue"]
    return (_key(f"{kind}TargetAssignmentMemberKey", version, group_id=group_id,
                 member_id=member_id),
            encode_value(V(topic_partitions=_topics_out(V.TopicPartition, assignment)), 0))


def target_member_record(group_id: str, member_id: str, assignment: dict) -> Record:
    return _target_member("ConsumerGroup", TARGET_MEMBER, group_id, member_id, assignment)


def current_assignment_record(group_id: str, m: ConsumerGroupMember) -> Record:
    V = _M["ConsumerGroupCurrentMemberAssignmentValue"]
    return (_key("ConsumerGroupCurrentMemberAssignmentKey", CURRENT_ASSIGNMENT,
                 group_id=group_id, member_id=m.member_id),
            encode_value(V(member_epoch=m.member_epoch,
                           previous_member_epoch=m.previous_member_epoch, state=int(m.state),
                           assigned_partitions=_topics_out(V.TopicPartitions, m.assigned),
                           partitions_pending_revocation=_topics_out(V.TopicPartitions,
                                                                     m.pending_revocation)),
                         0))


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    return [
        (_key("ConsumerGroupCurrentMemberAssignmentKey", CURRENT_ASSIGNMENT, group_id=group_id,
              member_id=member_id), None),
        (_key("ConsumerGroupTargetAssignmentMemberKey", TARGET_MEMBER, group_id=group_id,
              member_id=member_id), None),
        (_key("ConsumerGroupMemberMetadataKey", MEMBER_METADATA, group_id=group_id,
              member_id=member_id), None),
    ]


def group_tombstones(group: ConsumerGroup) -> list[Record]:
    gid = group.group_id
    out: list[Record] = []
    for mid in group.members:
        out += member_tombstones(gid, mid)
    out += [
        (_key("ConsumerGroupTargetAssignmentMetadataKey", TARGET_METADATA, group_id=gid), None),
        (_key("ConsumerGroupPartitionMetadataKey", PARTITION_METADATA, group_id=gid), None),
        (_key("ConsumerGroupMetadataKey", GROUP_METADATA, group_id=gid), None),
    ]
    return out


class ConsumerGroupReplay:
    """Collects consumer group records of one partition in log order; ``groups()`` builds
    the groups that exist at the end (members without metadata are dropped)."""

    def __init__(self) -> None:
        self._groups: dict[str, dict] = {}

    def _g(self, gid: str) -> dict:
        return self._groups.setdefault(gid, {"epoch": None, "meta": {}, "assign_epoch": 0,
                                             "members": {}, "target": {}, "current": {}})

    def add(self, key, value) -> bool:
        """Replay one record; False if it is not a consumer group record."""
        k, version = decode_group_key(key)
        if version not in (3, 4, 5, 6, 7, 8):
            return False
        gid = k.group_id
        if version == GROUP_METADATA and value is None:
            self._groups.pop(gid, None)
            return True
        g = self._g(gid)
        v = decode_value(type(k), value)[0] if value is not None else None
        if version == GROUP_METADATA:
            g["epoch"] = v.epoch
        elif version == PARTITION_METADATA:
            g["meta"] = {} if v is None else {t.topic_name: (t.topic_id, t.num_partitions)
                                              for t in v.topics}
        elif version == TARGET_METADATA:
            g["assign_epoch"] = 0 if v is None else v.assignment_epoch
        elif version == MEMBER_METADATA:
            if v is None:
                g["members"].pop(k.member_id, None)
            else:
                g["members"][k.member_id] = v
        elif version == TARGET_MEMBER:
            if v is None:
                g["target"].pop(k.member_id, None)
            else:
                g["target"][k.member_id] = _topics_in(v.topic_partitions)
        elif version == CURRENT_ASSIGNMENT:
            if v is None:
                g["current"].pop(k.member_id, None)
            else:
                g["current"][k.member_id] = v
        return True

    def groups(self, now_ms=None) -> dict[str, ConsumerGroup]:
        out: dict[str, ConsumerGroup] = {}
        for gid, g in self._groups.items():
            if g["epoch"] is None:
                continue
            group = ConsumerGroup(gid, now_ms)
            group.group_epoch = g["epoch"]
            group.assignment_epoch = g["assign_epoch"]
            group.subscription_metadata = dict(g["meta"])
            for mid, mv in g["members"].items():
                classic = None
                if mv.classic_member_metadata is not None:
                    cm = mv.classic_member_metadata
                    classic = ClassicMemberMetadata(
                        cm.session_timeout_ms,
                        tuple((p.name, bytes(p.metadata)) for p in cm.supported_protocols))
                m = ConsumerGroupMember(
                    member_id=mid, instance_id=mv.instance_id, rack_id=mv.rack_id,
                    client_id=mv.client_id, client_host=mv.client_host,
                    rebalance_timeout_ms=mv.rebalance_timeout_ms,
                    subscribed_topic_names=tuple(mv.subscribed_topic_names or ()),
                    subscribed_topic_regex=mv.subscribed_topic_regex or None,
                    server_assignor=mv.server_assignor, classic=classic)
                cur = g["current"].get(mid)
                if cur is not None:
                    try:
                        state = MemberState(cur.state)
                    except ValueError:
                        state = MemberState.UNKNOWN
                    m = replace(m, member_epoch=cur.member_epoch,
                                previous_member_epoch=cur.previous_member_epoch, state=state,
                                assigned=_topics_in(cur.assigned_partitions),
                                pending_revocation=_topics_in(
                                    cur.partitions_pending_revocation))
                group.update_member(m)
                if mid in g["target"]:
                    group.target[mid] = g["target"][mid]
            group.note_state()
            out[gid] = group
        return out
