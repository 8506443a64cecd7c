"""DelayedSync: the SyncGroup deadline of a freshly formed generation (Kafka 3.0+,
KAFKA-13054; Kafka's ``DelayedSync`` / ``pendingSyncMembers``).

When a rebalance's join phase completes, every member of the new generation owes the
coordinator a SyncGroup. The coordinator marks them all "pending sync" and parks one
DelayedSync per generation for the group's rebalance timeout (the largest
``rebalance.timeout.ms`` of its members, in ms), watching ``GroupKey(group_id)`` in the sync
purgatory. A SyncGroup (CompletingRebalance or Stable) clears the sender's mark and calls
``check_and_complete``; so does any new rebalance (which clears every mark). If the deadline
passes with marks left, those members are removed and the group rebalances: without this a
member that joined and then only heartbeats would hold its partitions unassigned forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from coordinator.group.group import GroupState

if TYPE_CHECKING:
    from coordinator.group.group import GroupMetadata

__all__ = ["DelayedSync"]

S = GroupState


class SyncExpirer(Protocol):
    """Who removes the members still pending sync at the deadline (the group coordinator)."""

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None: ...


class DelayedSync:
    """Waits for every member of ``generation_id`` to send SyncGroup; ``delay_ms`` = the
    group's rebalance timeout when the generation formed (a ``coordinator.runtime.
    DelayedWork``)."""

    __slots__ = ("delay_ms", "coordinator", "group", "generation_id", "timed_out")

    def __init__(self, coordinator: SyncExpirer, group: GroupMetadata, generation_id: int,
                 delay_ms: int) -> None:
        self.delay_ms = int(delay_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id
        self.timed_out = False

    def can_complete(self) -> bool:
        """Complete (without effect) when one of these holds:

        Case A: every member of the generation has sent SyncGroup (no pending-sync member).
        Case B: the generation is over: the group moved to another generation, or is
                PreparingRebalance, Empty or Dead (rebalance started, group unloaded or
                deleted), which also clears the pending-sync marks.
        (Case C, the rebalance timeout, is the timer: ``on_expire_pending_sync`` removes the
        members still pending and rebalances.)
        """
        group = self.group
        return (group.generation_id != self.generation_id
                or group.state in (S.DEAD, S.EMPTY, S.PREPARING_REBALANCE)
                or group.has_received_sync_from_all_members())

    def on_expiration(self) -> None:
        self.timed_out = True

    def on_complete(self) -> None:
        if self.timed_out:
            self.coordinator.on_expire_pending_sync(self.group, self.generation_id)
