"""Leader-side replica bookkeeping (Kafka's `kafka.cluster.Replica` and the partition states
of `kafka.cluster.Partition`).

`FollowerState`: one follower as the leader sees it, updated on each of its fetches:
its log end offset (the fetch offset), log start offset, broker epoch, and the time it was
last "caught up". Kafka's rule (Replica.updateFetchStateOrThrow): a fetch at or past the
leader's LEO at that moment makes the follower caught up *now*; a fetch at or past the
leader's LEO of the previous fetch makes it caught up as of the previous fetch. A follower
whose last caught-up time is older than `replica.lag.time.max.ms` is out of sync.

`PendingIsrChange`: an ISR change sent to the controller (AlterPartition) and not answered
yet. While one is in flight no other is started. The "maximal ISR" (KIP-497) used for the
high watermark is the proposed ISR for an expansion (stricter, safe if it fails) and the
committed ISR for a shrink (the shrink is not assumed until the controller accepts it).
"""

from __future__ import annotations

import dataclasses
import sys
import uuid

__all__ = ["FollowerState", "PendingIsrChange", "LeaderAndIsr", "LEADER_RECOVERED",
           "LEADER_RECOVERING", "shared_ids", "topic_id_text"]

# KIP-704 leader recovery state (LeaderAndIsr v6+, AlterPartition v1+, the state znode).
LEADER_RECOVERED = 0
LEADER_RECOVERING = 1

_ID_TUPLES: dict[tuple[int, ...], tuple[int, ...]] = {}


def shared_ids(ids) -> tuple[int, ...]:
    """`tuple(ids)`, one object per distinct list of broker ids: 100,000 partitions of a
    3-broker cluster have a handful of replica lists and ISRs between them."""
    t = tuple(ids)
    got = _ID_TUPLES.get(t)
    if got is None:
        if len(_ID_TUPLES) >= 65_536:
            _ID_TUPLES.clear()
        got = _ID_TUPLES[t] = t
    return got


_ID_TEXT: dict[uuid.UUID, str] = {}
_LAST_ID: list = [None, ""]  # the last (topic id object, text): a request's states come by topic


def topic_id_text(topic_id: uuid.UUID) -> str:
    """`str(topic_id)`, interned and remembered (one text per topic, made once, not once
    per partition state)."""
    last = _LAST_ID
    if topic_id is last[0]:
        return last[1]
    text = _ID_TEXT.get(topic_id)
    if text is None:
        if len(_ID_TEXT) > 100_000:
            _ID_TEXT.clear()
        text = _ID_TEXT[topic_id] = sys.intern(str(topic_id))  # as storage keeps it
    last[0], last[1] = topic_id, text
    return text


@dataclasses.dataclass(slots=True)
class FollowerState:
    """See the module docstring. Offsets in records, times in ms; -1 = unknown."""

    broker_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_fetch_leader_leo: int = 0
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0
    broker_epoch: int = -1

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, now_ms: int,
                           leader_leo: int, broker_epoch: int = -1) -> None:
        """A fetch from `fetch_offset` (the follower's LEO) read while the leader's LEO was
        `leader_leo`."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_leo = max(leader_leo, self.last_fetch_leader_leo)
        self.last_fetch_ms = now_ms
        self.broker_epoch = broker_epoch

    def reset(self, now_ms: int, leader_leo: int, new_leader: bool, in_sync: bool) -> None:
        """A new leader epoch on this leader (Kafka's resetReplicaState): an ISR member
        counts as caught up now; a new leader forgets the follower's offsets."""
        self.last_caught_up_ms = now_ms if in_sync else 0
        if new_leader:
            self.log_end_offset = -1
            self.log_start_offset = -1
            self.last_fetch_leader_leo = -1
            self.last_fetch_ms = 0
            self.broker_epoch = -1
        else:
            self.last_fetch_leader_leo = leader_leo
            self.last_fetch_ms = now_ms if in_sync else 0

    def is_caught_up(self, leader_leo: int, now_ms: int, max_lag_ms: int) -> bool:
        return leader_leo == self.log_end_offset or now_ms - self.last_caught_up_ms <= max_lag_ms


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's leadership state as the controller holds it (the state znode):
    `partition_epoch` is the znode version in ZooKeeper mode."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    leader_recovery_state: int = LEADER_RECOVERED


@dataclasses.dataclass(slots=True)
class PendingIsrChange:
    """An in-flight AlterPartition: `proposed` is what was sent, `committed_isr` what the
    ISR was before (restored when the controller says the change was not applied)."""

    kind: str  # "expand" | "shrink"
    proposed: LeaderAndIsr
    committed_isr: tuple[int, ...]
    changed: frozenset[int]

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.proposed.isr if self.kind == "expand" else self.committed_isr
