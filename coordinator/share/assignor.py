"""The share-group assignor: every member gets every subscribed partition, within reason.

KIP-932's first assignor gave each member all partitions of the topics it subscribes to:
share-partitions hand records out one by one, so several members on a partition is the
point. That stops making sense when so many members share a topic that most of their
fetches find nothing (the acquisition-lock window, `share.partition.max.record.locks`, caps
what one partition can have in flight). So, per topic:

- at most `all_members_limit` subscribers: each gets every partition of the topic;
- more: Kafka's SimpleAssignor rules (Kafka 4.x SimpleHomogeneous/HeterogeneousAssignment
  builders): each partition is shared by ceil(M / P) members, every member gets a balanced
  count (they differ by at most one), and existing assignments are kept where that
  balance allows (stickiness). Members with identical subscriptions are balanced over all
  their partitions together, as Kafka's homogeneous builder does; otherwise topic by topic.

Pure function; deterministic for a given input (members and partitions are visited sorted).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

__all__ = ["DEFAULT_ALL_MEMBERS_LIMIT", "assign_share_group"]

#: Subscribers of a topic up to which each gets all its partitions.
DEFAULT_ALL_MEMBERS_LIMIT = 16

TopicPartition = tuple[str, int]


def assign_share_group(
    subscriptions: Mapping[str, Collection[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, Mapping[str, Collection[int]]] | None = None,
    *,
    all_members_limit: int = DEFAULT_ALL_MEMBERS_LIMIT,
) -> dict[str, dict[str, list[int]]]:
    """Target assignment: member id -> topic -> sorted partitions.

    `subscriptions`: member id -> subscribed topics (topics missing from `partition_counts`
    do not exist yet and are skipped). `current`: the members' present assignment, for
    stickiness. Every member appears in the result, possibly with nothing.
    """
    members = sorted(subscriptions)
    result: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    held = {m: {(t, p) for t, ps in (current or {}).get(m, {}).items() for p in ps} for m in members}
    subscribers: dict[str, list[str]] = {}
    for m in members:
        for t in subscriptions[m]:
            if partition_counts.get(t, 0) > 0:
                subscribers.setdefault(t, []).append(m)
    crowded: dict[str, list[str]] = {}
    for t, subs in sorted(subscribers.items()):
        if len(subs) <= all_members_limit:
            for m in subs:
                result[m][t] = list(range(partition_counts[t]))
        else:
            crowded[t] = subs
    # Members subscribed to exactly the same crowded topics are balanced together.
    groups = {tuple(sorted(x for x in subscriptions[m] if x in crowded))
              for subs in crowded.values() for m in subs}
    if len(groups) == 1:
        (topics,) = groups
        units = [(topics, crowded[topics[0]])]
    else:
        units = [((t,), subs) for t, subs in crowded.items()]
    for topics, subs in units:
        parts = [(t, p) for t in topics for p in range(partition_counts[t])]
        for m, tps in _simple(sorted(subs), parts, held).items():
            for t, p in sorted(tps):
                result[m].setdefault(t, []).append(p)
    return result


def _simple(members: list[str], parts: list[TopicPartition],
            held: Mapping[str, set[TopicPartition]]) -> dict[str, set[TopicPartition]]:
    """Balanced, sticky sharing of `parts` among `members` (SimpleAssignor rules)."""
    n_members, n_parts = len(members), len(parts)
    sharing = -(-n_members // n_parts)  # ceil: members per partition
    base, extra = divmod(sharing * n_parts, n_members)
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(members)}
    assigned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    holders: dict[TopicPartition, set[str]] = {tp: set() for tp in parts}
    # Stickiness: keep what members already have while balance allows.
    for m in members:
        for tp in sorted(held.get(m, ())):
            if tp in holders and len(holders[tp]) < sharing and len(assigned[m]) < quota[m]:
                holders[tp].add(m)
                assigned[m].add(tp)
    order = {m: i for i, m in enumerate(members)}
    for tp in parts:
        while len(holders[tp]) < sharing:
            candidates = [m for m in members if m not in holders[tp]]
            under = [m for m in candidates if len(assigned[m]) < quota[m]] or candidates
            pick = min(under, key=lambda m: (len(assigned[m]), order[m]))
            holders[tp].add(pick)
            assigned[pick].add(tp)
    return assigned
