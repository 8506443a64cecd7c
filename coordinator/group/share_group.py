"""Share groups (KIP-932) as the group coordinator keeps them (Kafka's ShareGroup/ShareGroupMember).

A share group's members each get every partition of their subscribed topics (or Kafka's
simple assignor's share of them, `coordinator.share.assignor`): partitions are shared, so
there is no revocation and a member takes its new target assignment at once. Epochs follow
KIP-848: the group epoch moves when a subscription or the subscribed topics' metadata
change, the assignment epoch when a target assignment was computed for it, and a member's
epoch is the assignment epoch it was last given.

State (ShareGroupDescribe / ListGroups ``group_state``): ``Empty`` without members, else
``Stable`` (Kafka's share groups have no rebalancing states); ``Dead`` once deleted or
unloaded. ListGroups shows ``protocol_type`` "share" and ``group_type`` "share".

``initialized`` is the ShareGroupStatePartitionMetadata record's view: per topic id its name
and the partitions the group was ever assigned (their share state may exist in
``__share_group_state``), which DeleteGroups and DescribeShareGroupOffsets use.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

__all__ = ["ShareGroup", "ShareGroupMember", "ShareGroupState"]

Assignment = dict[uuid.UUID, frozenset[int]]


class ShareGroupState(enum.StrEnum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ShareGroupMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)


class ShareGroup:
    """One share group (see the module docstring)."""

    is_share_group = True
    protocol_type = "share"

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.metadata_hash = 0
        self.members: dict[str, ShareGroupMember] = {}
        self.target: dict[str, Assignment] = {}
        #: topic name -> (topic id, partition count) the target assignment was computed for
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}
        #: topic id -> (topic name, partitions with share state)
        self.initialized: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        self.dead = False
        self.offsets: dict = {}  # never used: share groups commit no offsets
        self.pending_txn_offsets: dict = {}

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def state_partitions(self) -> list[tuple[uuid.UUID, str, int]]:
        """(topic id, topic name, partition) of every partition that may have share state."""
        return [(tid, name, p) for tid, (name, ps) in sorted(self.initialized.items(), key=str)
                for p in sorted(ps)]

    def __repr__(self) -> str:
        return (f"ShareGroup({self.group_id}, {self.state}, epoch={self.group_epoch}, "
                f"members={len(self.members)})")
