"""Fetching from the closest replica (KIP-392): which replica a consumer should read from.

`replica.selector.class` (broker key, default unset = always the leader) may name Kafka's
`org.apache.kafka.common.replica.RackAwareReplicaSelector` (or `LeaderSelector`). The leader
asks the selector for each consumer fetch (Fetch v11+, the consumer's `client.rack` arrives
as `rack_id`); when it picks another replica the leader answers that partition with
`preferred_read_replica` and no records, and the consumer fetches from that broker, which
serves reads up to its own high watermark.

Candidates are the leader and the followers that are in the ISR and hold the fetch offset
(log start <= offset <= LEO), as Kafka's ReplicaManager.findPreferredReadReplica. The
rack-aware rule (Kafka's RackAwareReplicaSelector): no client rack, or no replica in the
client's rack -> the leader; the leader in that rack -> the leader; else the same-rack replica
with the highest LEO (then the one caught up most recently).
"""

from __future__ import annotations

import dataclasses

__all__ = ["ReplicaView", "RackAwareReplicaSelector", "LeaderSelector", "selector_for",
           "preferred_read_replica"]

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER = "org.apache.kafka.common.replica.LeaderSelector"


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaView:
    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


class LeaderSelector:
    """Always the leader (Kafka's default when no selector is configured)."""

    def select(self, client_rack: str, leader: ReplicaView, replicas: list[ReplicaView]
               ) -> ReplicaView:
        return leader


class RackAwareReplicaSelector:
    def select(self, client_rack: str, leader: ReplicaView, replicas: list[ReplicaView]
               ) -> ReplicaView:
        if not client_rack:
            return leader
        same = [r for r in replicas if r.rack == client_rack]
        if not same or any(r.broker_id == leader.broker_id for r in same):
            return leader
        return max(same, key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms))


def selector_for(class_name: str | None):
    """The selector named by `replica.selector.class`; None for unset; ValueError for a class
    Josef does not implement."""
    if not class_name:
        return None
    short = class_name.rsplit(".", 1)[-1]
    if short == "RackAwareReplicaSelector":
        return RackAwareReplicaSelector()
    if short == "LeaderSelector":
        return LeaderSelector()
    raise ValueError(f"unsupported replica selector {class_name!r} (supported: {RACK_AWARE}, "
                     f"{LEADER})")


def preferred_read_replica(rm, part, fetch_offset: int, rack: str) -> int | None:
    """KIP-392: the replica `rm.replica_selector` prefers for a consumer in `rack` reading
    `part` (a led Partition) at `fetch_offset`, if it is not this leader (Kafka's
    ReplicaManager.findPreferredReadReplica: ISR followers holding the offset)."""
    cache = rm.metadata_cache
    racks = {b.id: b.rack for b in cache.alive_brokers()} \
        if hasattr(cache, "alive_brokers") else {}
    now = rm.time_ms()
    leader = ReplicaView(rm.broker_id, racks.get(rm.broker_id), part.log_end_offset, 0)
    candidates = [leader] + [
        ReplicaView(f.broker_id, racks.get(f.broker_id), f.log_end_offset,
                    now - f.last_caught_up_ms)
        for f in part.followers.values()
        if f.broker_id in part.isr and f.broker_id in racks
        and f.log_start_offset <= fetch_offset <= f.log_end_offset]
    chosen = rm.replica_selector.select(rack, leader, candidates)
    return None if chosen is None or chosen.broker_id == rm.broker_id else chosen.broker_id
