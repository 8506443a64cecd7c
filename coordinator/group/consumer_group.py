"""KIP-848 consumer groups: the group, its members, and a member's reconciliation.

A consumer group (Kafka's ``ConsumerGroup``) has a **group epoch** (bumped whenever the
members or their subscriptions, or the subscribed topics' partition counts, change), a
**target assignment** per member computed by a server-side assignor at an **assignment
epoch**, and per member a **current assignment** with a **member epoch**. Members converge
to the target one heartbeat at a time (``reconcile``, Kafka's CurrentAssignmentBuilder):

- a member first gives up the partitions it must lose: it stays at its epoch in state
  UNREVOKED_PARTITIONS until its heartbeat no longer reports them as owned;
- it then moves to the target epoch and receives the new partitions that are free; a
  partition still held (assigned or pending revocation) by another member is withheld
  (state UNRELEASED_PARTITIONS) until that member released it.

So a partition is never owned by two members at once ("incremental reconciliation").
Assignments are ``{topic_id: frozenset(partitions)}``. Group states (``str()`` as Kafka's
ConsumerGroupState): Empty (no members), Assigning (group epoch ahead of the assignment
epoch), Reconciling (some member not yet Stable at the assignment epoch), Stable.

Members may also be **classic** members (KIP-848 online migration): consumers using
JoinGroup/SyncGroup/Heartbeat whose state lives here; ``classic`` holds their session timeout
and supported protocols. Offsets of the group live in ``offsets`` (same API as the classic
``GroupMetadata`` offsets: both are ``GroupOffsets``, so the coordinator's commit path serves
both kinds).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from coordinator.group.group import GroupOffsets

__all__ = ["Assignment", "ClassicMemberMetadata", "ConsumerGroup", "ConsumerGroupMember",
           "ConsumerGroupState", "MemberState", "reconcile", "subscription_changed"]

Assignment = dict  # {uuid.UUID: frozenset[int]}
EMPTY_ASSIGNMENT: dict = {}


class MemberState(enum.IntEnum):
    """Kafka's MemberState (the byte stored in ConsumerGroupCurrentMemberAssignmentValue)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    def __str__(self) -> str:
        return self.name.lower()


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol inside a consumer group."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member (immutable: updates make a new one with ``dataclasses.replace``)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def with_epoch(self, epoch: int, **changes) -> ConsumerGroupMember:
        """Kafka's updateMemberEpoch: the old epoch becomes the previous one."""
        return replace(self, previous_member_epoch=self.member_epoch, member_epoch=epoch,
                       **changes)


def assignment_partitions(a: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def _owns_any(owned: Assignment | None, revoking: Assignment) -> bool:
    """Does the member still report any of ``revoking``? Unknown (``None``) = yes."""
    if owned is None:
        return True
    return any(p in revoking.get(t, ()) for t, ps in owned.items() for p in ps)


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return True
    return all(p in assigned.get(t, ()) for t, ps in owned.items() for p in ps)


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              partition_epoch: Callable[[uuid.UUID, int], int],
              owned: Assignment | None) -> ConsumerGroupMember:
    """Kafka's CurrentAssignmentBuilder: the member's next state towards ``target`` at
    ``target_epoch``. ``partition_epoch(topic_id, p)`` is the epoch of the member holding
    that partition (-1 = free); ``owned`` is what the member's heartbeat reported (None when
    it did not say). Raises nothing: a member in an unknown state restarts from scratch."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch,
                     owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _next(member: ConsumerGroupMember, member_epoch: int, target_epoch: int,
          target: Assignment, partition_epoch, owned) -> ConsumerGroupMember:
    assigned = member.assigned
    new_assigned: dict = {}
    revoking: dict = {}
    pending_assign: dict = {}
    unreleased = False
    for t in set(target) | set(assigned):
        want = target.get(t, frozenset())
        have = assigned.get(t, frozenset())
        keep = have & want
        if keep:
            new_assigned[t] = keep
        if have - keep:
            revoking[t] = frozenset(have - keep)
        to_add = {p for p in want - keep if partition_epoch(t, p) == -1}
        if len(to_add) < len(want - keep):
            unreleased = True
        if to_add:
            pending_assign[t] = frozenset(to_add)
    if revoking and _owns_any(owned, revoking):
        return replace(member, previous_member_epoch=member.member_epoch,
                       member_epoch=member_epoch, state=MemberState.UNREVOKED_PARTITIONS,
                       assigned=new_assigned, pending_revocation=revoking)
    for t, ps in pending_assign.items():
        new_assigned[t] = new_assigned.get(t, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=new_assigned,
                             pending_revocation={})


class ConsumerGroup(GroupOffsets):
    """One KIP-848 group (see the module docstring). ``now_ms`` is the wall clock used for
    the time the group last changed state (offset retention of Empty groups, KIP-211)."""

    is_consumer_group = True
    protocol_type = "consumer"

    def __init__(self, group_id: str, now_ms: Callable[[], int] | None = None) -> None:
        self.group_id = group_id
        self._now_ms = now_ms or (lambda: -1)
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        # topic name -> (topic id, partition count) of the subscribed topics
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}
        # (topic id, partition) -> epoch of the member holding it (assigned or revoking)
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        super().__init__()
        self.current_state_timestamp = self._now_ms()
        self._last_state = ConsumerGroupState.EMPTY
        self.dead = False

    # --- state -------------------------------------------------------------------------------
    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def note_state(self) -> None:
        """Record when the group entered its current state (call after each change)."""
        s = self.state
        if s is not self._last_state:
            self._last_state = s
            self.current_state_timestamp = self._now_ms()

    def is_state(self, state) -> bool:
        """Only a classic ``GroupState`` is asked here by shared code: never one of ours."""
        return isinstance(state, ConsumerGroupState) and self.state is state

    @property
    def size(self) -> int:
        return len(self.members)

    def member_by_instance(self, instance_id: str | None) -> ConsumerGroupMember | None:
        mid = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(mid) if mid is not None else None

    def all_use_classic_except(self, member_id: str) -> bool:
        return all(m.uses_classic_protocol for mid, m in self.members.items()
                   if mid != member_id)

    # --- members and partition ownership ---------------------------------------------------
    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def update_member(self, member: ConsumerGroupMember) -> None:
        """Insert or replace a member, keeping the ownership map and the static index."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and old.instance_id != member.instance_id:
                self.static_members.pop(old.instance_id, None)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._hold(member)

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and \
                    self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]
        self.target.pop(member_id, None)
        return old

    def _hold(self, m: ConsumerGroupMember) -> None:
        for a in (m.assigned, m.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    self.partition_epochs[(t, p)] = m.member_epoch

    def _release(self, m: ConsumerGroupMember) -> None:
        for a in (m.assigned, m.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    self.partition_epochs.pop((t, p), None)

    def subscribed_topic_names(self) -> set[str]:
        """Names listed by the members' subscriptions (regex matches are added by the
        caller, who knows the cluster's topics)."""
        out: set[str] = set()
        for m in self.members.values():
            out.update(m.subscribed_topic_names)
        return out

    # --- offsets (the bookkeeping is GroupOffsets', shared with classic groups) ------------
    def expired_offsets(self, now_ms: int, retention_ms: int,
                        subscribed: set[str] | None = None) -> list[tuple[str, int]]:
        """Kafka's consumer-group retention: an Empty group's offsets ``retention_ms`` after
        it became Empty; otherwise the offsets of topics nobody subscribes to
        (``subscribed``, default the names the members list), ``retention_ms`` after their
        commit. Offsets with a commit in flight never expire."""
        empty = not self.members
        topics = subscribed if subscribed is not None else self.subscribed_topic_names()
        out = []
        for tp, om in self.offsets.items():
            if self.has_pending_offset_commit(tp) or (not empty and tp[0] in topics):
                continue
            if om.expire_timestamp >= 0:
                if now_ms >= om.expire_timestamp:
                    out.append(tp)
                continue
            base = self.current_state_timestamp if empty and self.current_state_timestamp >= 0 \
                else om.commit_timestamp
            if now_ms - base >= retention_ms:
                out.append(tp)
        return out

    def __repr__(self) -> str:
        return (f"ConsumerGroup({self.group_id}, {self.state}, epoch={self.group_epoch}, "
                f"assignment_epoch={self.assignment_epoch}, members={list(self.members)})")


def subscription_changed(a: ConsumerGroupMember, b: ConsumerGroupMember) -> bool:
    """Whether what a member subscribes with (names, regex, assignor, rack) differs."""
    return (a.subscribed_topic_names != b.subscribed_topic_names
            or a.subscribed_topic_regex != b.subscribed_topic_regex
            or a.server_assignor != b.server_assignor or a.rack_id != b.rack_id)

