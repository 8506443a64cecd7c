"""DelayedJoin and InitialDelayedJoin: the rebalance wait in the purgatory (Kafka's).

A rebalance (PreparingRebalance) waits for every known member to send JoinGroup again, at
most the group's rebalance timeout (the largest ``rebalance.timeout.ms`` of its members, in
ms). The operation watches ``GroupKey(group_id)``; the coordinator calls
``check_and_complete`` on that key whenever a member joins, leaves or expires.

``InitialDelayedJoin`` is used when the group was Empty: it never completes early, waits
``group.initial.rebalance.delay.ms`` and, while new members keep arriving, waits again (each
time at most that delay), never longer in total than the rebalance timeout; this lets a group
whose consumers start together form in one rebalance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from coordinator.keys import GroupKey
from coordinator.runtime import CoordinatorPurgatory

if TYPE_CHECKING:
    from coordinator.group.group import GroupMetadata

__all__ = ["DelayedJoin", "InitialDelayedJoin"]


class JoinCompleter(Protocol):
    """Who forms the generation when the join phase ends (the group coordinator)."""

    def on_complete_join(self, group: GroupMetadata) -> None: ...


class DelayedJoin:
    """Completes the join phase of ``group``'s rebalance; ``delay_ms`` = rebalance timeout
    (a ``coordinator.runtime.DelayedWork``)."""

    __slots__ = ("delay_ms", "coordinator", "group")

    def __init__(self, coordinator: JoinCompleter, group: GroupMetadata,
                 delay_ms: int) -> None:
        self.delay_ms = int(delay_ms)
        self.coordinator = coordinator
        self.group = group

    def can_complete(self) -> bool:
        """Complete when one of these holds:

        Case A: every member of the group has an outstanding JoinGroup and no pending
                (KIP-394) member is still expected -> the generation is formed.
        Case B: the group has no members left (all left or expired) -> same check as A
                (0 == 0); the group becomes Empty.
        (Case C, the rebalance timeout, is the timer: members that did not rejoin are
        removed, then the generation is formed with the rest.)
        """
        return self.group.has_all_members_joined()

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an Empty group (see the module docstring)."""

    __slots__ = ("purgatory", "configured_delay_ms", "remaining_ms")

    def __init__(self, coordinator: JoinCompleter, purgatory: CoordinatorPurgatory,
                 group: GroupMetadata, configured_delay_ms: int, delay_ms: int,
                 remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.purgatory = purgatory
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def can_complete(self) -> bool:
        """Never completes early: only the delay (timer) ends it (Case A of the module
        docstring: waits again while new members arrive and rebalance time remains)."""
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.configured_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay_ms, 0)
            self.purgatory.try_complete_else_watch(
                InitialDelayedJoin(self.coordinator, self.purgatory, group,
                                   self.configured_delay_ms, delay, remaining),
                [GroupKey(group.group_id)])
        else:
            super().on_complete()
