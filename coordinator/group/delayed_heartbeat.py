"""DelayedHeartbeat: a member's session timeout in the purgatory (Kafka's).

After every heartbeat (and join/sync) the coordinator completes the member's previous
DelayedHeartbeat and parks a new one for ``session.timeout.ms`` (ms) watching
``MemberKey(group_id, member_id)``. If it expires, the member is removed and the group
rebalances. Pending members (KIP-394: given a member id with MEMBER_ID_REQUIRED) get one too,
so an id that never comes back is forgotten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from coordinator.group.group import GroupMetadata

__all__ = ["DelayedHeartbeat"]


class HeartbeatExpirer(Protocol):
    """Who removes a member whose session ran out (the group coordinator)."""

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str,
                            is_pending: bool) -> None: ...


class DelayedHeartbeat:
    """A member's session timeout (a ``coordinator.runtime.DelayedWork``)."""

    __slots__ = ("delay_ms", "coordinator", "group", "member_id", "pending_member", "timed_out")

    def __init__(self, coordinator: HeartbeatExpirer, group: GroupMetadata, member_id: str,
                 is_pending: bool, delay_ms: int) -> None:
        self.delay_ms = int(delay_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.pending_member = is_pending
        self.timed_out = False

    def can_complete(self) -> bool:
        """Complete (without effect) when one of these holds:

        Case A: a pending member has joined with its id, or is no longer pending.
        Case B: the member heartbeated, joined or synced since this operation was parked
                (``heartbeat_satisfied``), or waits in JoinGroup/SyncGroup (not for new
                members), or is leaving.
        Case C: the member is gone from the group (left, fenced, group unloaded).
        (Case D, the session timeout, is the timer: the member is removed, REBALANCE.)
        """
        group = self.group
        if self.pending_member:
            return self.member_id in group or not group.is_pending_member(self.member_id)
        member = group.members.get(self.member_id)
        return member is None or member.is_leaving or member.has_satisfied_heartbeat()

    def on_expiration(self) -> None:
        self.timed_out = True

    def on_complete(self) -> None:
        if self.timed_out:
            self.coordinator.on_expire_heartbeat(self.group, self.member_id,
                                                 self.pending_member)
