"""GroupMetadata and MemberMetadata: one classic consumer group and its state machine.

States (Kafka's ``GroupState``; ``VALID_PREVIOUS_STATES`` declares each state's allowed
predecessors, a transition from any other state raises ``IllegalStateTransition``)::

    Empty ──join──> PreparingRebalance ──all joined──> CompletingRebalance ──leader sync──> Stable
      ^                 ^    │ (no members left)             │                              │
      └─────────────────┼────┘                               │ member joins/leaves/expires   │
                        └────────────────────────────────────┴──────────────────────────────┘
    any state ──group deleted / partition emigrated / offsets expired──> Dead

- Empty: no members; may still hold committed offsets (a "simple" group committing with
  generation -1, or a consumer group whose members all left).
- PreparingRebalance: waiting (DelayedJoin, up to the rebalance timeout) for every known
  member to send JoinGroup again.
- CompletingRebalance: the generation is formed; waiting for the leader's SyncGroup with the
  assignment.
- Stable: assignment propagated; members heartbeat.
- Dead: removed; requests answer COORDINATOR_NOT_AVAILABLE / UNKNOWN_MEMBER_ID.

Member ids are ``<client id>-<uuid4>`` (Kafka's format). Static members (KIP-345) keep a
``group.instance.id -> member id`` mapping; pending members (KIP-394) got a member id with
MEMBER_ID_REQUIRED and have not joined with it yet. Offsets live here too
(``OffsetAndMetadata`` per (topic, partition)); times are ms since the epoch.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode, KafkaError
from protocol.messages import MESSAGES

__all__ = [
    "GroupMetadata",
    "GroupOffsets",
    "GroupState",
    "IllegalStateTransition",
    "MemberMetadata",
    "OffsetAndMetadata",
    "VALID_PREVIOUS_STATES",
    "consumer_subscribed_topics",
]


CONSUMER_PROTOCOL_TYPE = "consumer"
_SUBSCRIPTION = MESSAGES["ConsumerProtocolSubscription"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


S = GroupState
#: state -> the states it may be entered from (Kafka's validPreviousStates).
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY,
                       S.DEAD}),
}


class IllegalStateTransition(RuntimeError):
    """A transition not allowed by VALID_PREVIOUS_STATES (a coordinator bug)."""


@dataclass(slots=True)
class OffsetAndMetadata:
    """One committed offset. ``commit_timestamp`` / ``expire_timestamp`` in ms (-1 = none);
    ``leader_epoch`` -1 when the client did not send one; ``metadata`` the client's string."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


class GroupOffsets:
    """The committed offsets of a group and the commits in flight: what the classic
    (``GroupMetadata``) and the KIP-848 (``ConsumerGroup``) groups keep alike, so the
    coordinator's commit, fetch and transactional-offset paths serve both kinds.

    ``offsets``: (topic, partition) -> OffsetAndMetadata; ``pending_offset_commits``:
    (topic, partition) -> appends in flight; ``pending_txn_offsets``: producer id -> offsets
    waiting for the transaction's COMMIT marker (TxnOffsetCommit, ``txn_offsets``)."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.pending_offset_commits: dict[tuple[str, int], int] = {}
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = {}

    def take_offsets(self, other: GroupOffsets) -> None:
        """Carry ``other``'s offsets and commits in flight over (a group converted between
        the classic and the consumer protocol keeps them)."""
        self.offsets = other.offsets
        self.pending_offset_commits = other.pending_offset_commits
        self.pending_txn_offsets = other.pending_txn_offsets

    def prepare_offset_commit(self, tps) -> None:
        for tp in tps:
            self.pending_offset_commits[tp] = self.pending_offset_commits.get(tp, 0) + 1

    def finish_offset_commit(self, committed: dict[tuple[str, int], OffsetAndMetadata] | None,
                             tps) -> None:
        """The append finished: store ``committed`` (None when it failed) and drop the
        pending marks of ``tps``."""
        for tp in tps:
            n = self.pending_offset_commits.get(tp, 0) - 1
            if n > 0:
                self.pending_offset_commits[tp] = n
            else:
                self.pending_offset_commits.pop(tp, None)
        if committed:
            self.offsets.update(committed)

    def has_pending_offset_commit(self, tp: tuple[str, int]) -> bool:
        """A commit of `tp` in flight, or one in an open transaction (KIP-447: OffsetFetch
        with require_stable answers UNSTABLE_OFFSET_COMMIT)."""
        return tp in self.pending_offset_commits or \
            any(tp in p for p in self.pending_txn_offsets.values())


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup waiter is answered with (the handler builds the response)."""

    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[tuple[str, str | None, bytes]] | None = None  # (id, instance id, metadata)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class MemberMetadata:
    """One member. ``supported_protocols`` is the JoinGroup list ``[(name, metadata)]`` in the
    member's preference order; timeouts in ms. ``join_callback`` / ``sync_callback`` are set
    while a JoinGroup / SyncGroup waits for the rebalance (called once with a JoinResult /
    SyncResult)."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host",
                 "rebalance_timeout_ms", "session_timeout_ms", "protocol_type",
                 "supported_protocols", "assignment", "join_callback", "sync_callback",
                 "is_new", "heartbeat_satisfied", "is_leaving")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str,
                 client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                 protocol_type: str, supported_protocols: list[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = list(supported_protocols)
        self.assignment = b""
        self.join_callback: Callable[[JoinResult], None] | None = None
        self.sync_callback: Callable[[SyncResult], None] | None = None
        self.is_new = False
        self.heartbeat_satisfied = False
        self.is_leaving = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def protocols(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.supported_protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, same order (no rebalance needed)."""
        return [(n, bytes(m)) for n, m in protocols] == \
            [(n, bytes(m)) for n, m in self.supported_protocols]

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka's rule: a new member must heartbeat (it can expire while awaiting join);
        a member waiting in JoinGroup/SyncGroup counts as alive; otherwise the last
        heartbeat must have arrived within the session timeout."""
        if self.is_new:
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True
        return self.heartbeat_satisfied

    def vote(self, candidates: set[str]) -> str:
        for name in self.protocols():
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def __repr__(self) -> str:
        return (f"MemberMetadata({self.member_id!r}, instance={self.group_instance_id!r}, "
                f"protocols={self.protocols()})")


class GroupMetadata(GroupOffsets):
    """One group (see the module docstring). ``now_ms`` is the wall clock for
    ``current_state_timestamp`` (KIP-211: when the group last changed state)."""

    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.group_id = group_id
        self.state = state
        self._now_ms = now_ms or (lambda: -1)
        self.current_state_timestamp = self._now_ms()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}
        self.new_member_added = False
        super().__init__()

    # --- state machine ---------------------------------------------------------------------
    def is_state(self, state: GroupState) -> bool:
        return self.state is state

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(
                f"Group {self.group_id} should be in one of "
                f"{sorted(str(s) for s in VALID_PREVIOUS_STATES[target])} before moving to "
                f"{target}; current state {self.state}")
        self.state = target
        self.current_state_timestamp = self._now_ms()

    # --- members ---------------------------------------------------------------------------
    def __contains__(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def is_empty(self) -> bool:
        return not self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, callback: Callable[[JoinResult], None] | None = None
            ) -> None:
        """Add a member (the first one sets the protocol type and becomes leader)."""
        if not self.members:
            self.protocol_type = member.protocol_type
        if member.protocol_type != self.protocol_type:
            raise ValueError("member protocol type differs from the group's")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        for name in member.protocols():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1
        member.join_callback = callback
        if callback is not None:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._uncount_protocols(member)
        if member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        self.pending_sync_members.discard(member_id)
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = self._pick_new_leader()
        return member

    def _uncount_protocols(self, member: MemberMetadata) -> None:
        """Drop ``member``'s protocols from ``supported_protocols`` (name -> members)."""
        for name in member.protocols():
            n = self.supported_protocols.get(name, 0) - 1
            if n > 0:
                self.supported_protocols[name] = n
            else:
                self.supported_protocols.pop(name, None)

    def _pick_new_leader(self) -> str | None:
        for mid, m in self.members.items():
            if m.is_awaiting_join:
                return mid
        return next(iter(self.members), None)

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]],
                      rebalance_timeout_ms: int, session_timeout_ms: int,
                      callback: Callable[[JoinResult], None] | None) -> None:
        self._uncount_protocols(member)
        member.supported_protocols = list(protocols)
        for name in member.protocols():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.join_callback = callback

    def invoke_join_callback(self, member: MemberMetadata, result: JoinResult) -> None:
        cb = member.join_callback
        if cb is not None:
            member.join_callback = None
            self.num_members_awaiting_join -= 1
            cb(result)

    def invoke_sync_callback(self, member: MemberMetadata, result: SyncResult) -> bool:
        cb = member.sync_callback
        if cb is None:
            return False
        member.sync_callback = None
        cb(result)
        return True

    # pending (KIP-394) and static (KIP-345) members
    def add_pending_member(self, member_id: str) -> None:
        self.pending_members.add(member_id)

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def remove_pending_member(self, member_id: str) -> None:
        self.pending_members.discard(member_id)

    # pending sync (KAFKA-13054): members of the current generation that owe a SyncGroup
    def add_pending_sync_member(self, member_id: str) -> None:
        if member_id not in self.members:
            raise ValueError(f"pending sync for {member_id}, not a member of {self.group_id}")
        self.pending_sync_members.add(member_id)

    def remove_pending_sync_member(self, member_id: str) -> None:
        self.pending_sync_members.discard(member_id)

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def clear_pending_sync_members(self) -> None:
        self.pending_sync_members.clear()

    def add_static_member(self, instance_id: str, member_id: str) -> None:
        self.static_members[instance_id] = member_id

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """True when ``instance_id`` is known under a different member id (FENCED_INSTANCE_ID)."""
        if instance_id is None:
            return False
        known = self.static_members.get(instance_id)
        return known is not None and known != member_id

    def member_error(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's ``validateCurrentMember``: with an instance id, it must be known
        (UNKNOWN_MEMBER_ID) and map to ``member_id`` (FENCED_INSTANCE_ID); the member id
        must be a member (UNKNOWN_MEMBER_ID). NONE when valid."""
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def replace_static_member(self, instance_id: str, old_member_id: str,
                              new_member_id: str) -> MemberMetadata:
        """KIP-345: the rejoining instance takes over the old member under a new id; the old
        one's waiters answer FENCED_INSTANCE_ID."""
        member = self.members.pop(old_member_id)
        if member.is_awaiting_join:
            cb, member.join_callback = member.join_callback, None
            self.num_members_awaiting_join -= 1
            cb(JoinResult(int(ErrorCode.FENCED_INSTANCE_ID), old_member_id))
        if member.is_awaiting_sync:
            cb, member.sync_callback = member.sync_callback, None
            cb(SyncResult(int(ErrorCode.FENCED_INSTANCE_ID)))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        return member

    # --- rebalance -------------------------------------------------------------------------
    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def maybe_elect_new_joined_leader(self) -> bool:
        """Kafka's ``maybeElectNewJoinedLeader``: True when the leader has rejoined, or
        another member that rejoined now leads; False when no member rejoined (or there is
        no leader)."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for mid, m in self.members.items():
            if m.is_awaiting_join:
                self.leader_id = mid
                return True
        return False

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, protocols: list[str]) -> bool:
        """Kafka's rule: an empty group takes any non-empty type with >= 1 protocol; else the
        type must match and one of the protocols must be supported by every member."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and any(
            self.supported_protocols.get(p, 0) == len(self.members) for p in protocols)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes wins (ties: the
        first member's preference order)."""
        if not self.members:
            raise ValueError("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values())).protocols()
        best = max(votes.values())
        return next(p for p in first if votes.get(p) == best)

    def init_next_generation(self) -> None:
        """Bump the generation; CompletingRebalance with a selected protocol, or Empty."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY)

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, instance id, metadata for the selected protocol) for the leader."""
        if self.protocol_name is None:
            return []
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()]

    # --- offsets (GroupOffsets) ------------------------------------------------------------
    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """The offsets to expire now (Kafka's ``removeExpiredOffsets``; ``retention_ms`` =
        ``offsets.retention.minutes``). An offset with a commit in flight never expires; one
        with an explicit ``expire_timestamp`` (OffsetCommit v2-v4 retention time) expires at
        that time. Otherwise, by group:

        - Empty group with a protocol type (its members left; KIP-211): ``retention_ms``
          after the group became Empty (``current_state_timestamp``; the commit time when
          unknown). Later commits to the Empty group do not restart that clock.
        - Stable ``consumer`` group whose members' subscriptions parse (KIP-496): offsets of
          topics no member subscribes to, ``retention_ms`` after their commit.
        - no protocol type (a "simple" group that only stores offsets): ``retention_ms``
          after each commit.
        - any other group (rebalancing, other protocols, unknown subscriptions): none.
        """
        subscribed: set[str] = set()
        if self.protocol_type is not None and self.state is GroupState.EMPTY:
            state_ts = self.current_state_timestamp

            def base(om: OffsetAndMetadata) -> int:
                return state_ts if state_ts >= 0 else om.commit_timestamp
        elif self.protocol_type is None:
            def base(om: OffsetAndMetadata) -> int:
                return om.commit_timestamp
        elif self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.state is GroupState.STABLE:
            topics = self.subscribed_topics()
            if topics is None:
                return []
            subscribed = topics

            def base(om: OffsetAndMetadata) -> int:
                return om.commit_timestamp
        else:
            return []
        out = []
        for tp, om in self.offsets.items():
            if tp[0] in subscribed or tp in self.pending_offset_commits:
                continue
            if om.expire_timestamp >= 0:
                if now_ms >= om.expire_timestamp:
                    out.append(tp)
            elif now_ms - base(om) >= retention_ms:
                out.append(tp)
        return out

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only; None if unknown)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics |= consumer_subscribed_topics(m.metadata(self.protocol_name))
            except (KeyError, ValueError):
                return None
        return topics

    def __repr__(self) -> str:
        return (f"GroupMetadata({self.group_id!r}, {self.state}, generation="
                f"{self.generation_id}, members={list(self.members)})")


def new_member_id(client_id: str) -> str:
    """Kafka's member id format: ``<client id>-<random UUID>``."""
    return f"{client_id}-{uuid.uuid4()}"


def consumer_subscribed_topics(metadata: Any) -> set[str]:
    """Topics of a consumer-protocol JoinGroup metadata: ``int16 version`` then a
    ``ConsumerProtocolSubscription`` of that version (v0 topics + user data, v1 owned
    partitions, v2 generation, v3 rack). A version newer than the schema is read with the
    newest schema (Kafka's ConsumerProtocol does the same: fields are only appended).
    Raises ValueError for malformed bytes."""
    buf = bytes(metadata)
    if len(buf) < 2:
        raise ValueError("consumer protocol subscription shorter than its version")
    (version,) = struct.unpack_from(">h", buf, 0)
    if version < 0:
        raise ValueError(f"consumer protocol subscription version {version}")
    try:
        sub = _SUBSCRIPTION.decode(buf[2:], min(version, _SUBSCRIPTION.max_version))
    except KafkaError as e:
        raise ValueError(f"malformed consumer protocol subscription: {e}") from None
    return {t for t in sub.topics if t is not None}
