"""Server-side partition assignors of KIP-848 consumer groups (``group.consumer.assignors``).

An assignor maps ``members: {member_id: MemberSpec(subscribed topic ids, current target)}``
and ``partitions: {topic_id: partition count}`` to ``{member_id: {topic_id: frozenset}}``.
Every partition of a subscribed topic goes to exactly one member subscribed to it.

- ``uniform`` (Kafka's UniformAssignor, the default): balanced across members (counts
  differ by at most one among members with the same subscriptions) and sticky: a partition
  stays with its current owner unless balance requires moving it.
- ``range`` (Kafka's RangeAssignor): per topic, the subscribed members sorted by member id
  take contiguous ranges, the first ``count % members`` one partition more; members with
  the same subscriptions get the same partition numbers of every topic (co-partitioning).

Both are deterministic for the same input (sorted member ids, sorted partitions).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

__all__ = ["ASSIGNORS", "MemberSpec", "RangeAssignor", "UniformAssignor"]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    topics: frozenset  # subscribed topic ids
    current: dict  # {topic_id: frozenset[int]}: the member's previous target assignment


def _freeze(out: dict[str, dict[uuid.UUID, set[int]]]) -> dict:
    return {m: {t: frozenset(ps) for t, ps in a.items() if ps} for m, a in out.items()}


class UniformAssignor:
    name = "uniform"

    def assign(self, members: dict[str, MemberSpec], partitions: dict[uuid.UUID, int]) -> dict:
        ids = sorted(members)
        out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in ids}
        load = dict.fromkeys(ids, 0)
        eligible = {t: [m for m in ids if t in members[m].topics] for t in partitions}
        owner: dict[tuple[uuid.UUID, int], str] = {}
        # 1. stickiness: keep what members already had (still subscribed, still existing)
        for m in ids:
            for t, ps in members[m].current.items():
                n = partitions.get(t)
                if n is None or t not in members[m].topics:
                    continue
                for p in sorted(ps):
                    if p < n and (t, p) not in owner:
                        owner[(t, p)] = m
                        out[m].setdefault(t, set()).add(p)
                        load[m] += 1
        # 2. free partitions to the least loaded eligible member (topics with the fewest
        #    subscribers first: they have the fewest choices)
        for t in sorted(partitions, key=lambda t: (len(eligible[t]), str(t))):
            cands = eligible[t]
            if not cands:
                continue
            for p in range(partitions[t]):
                if (t, p) in owner:
                    continue
                m = min(cands, key=lambda c: (load[c], c))
                owner[(t, p)] = m
                out[m].setdefault(t, set()).add(p)
                load[m] += 1
        # 3. balance: move partitions from the most to the least loaded eligible member
        #    while that narrows the gap (bounded: each move lowers the sum of squares)
        moved = True
        while moved:
            moved = False
            for (t, p), m in sorted(owner.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
                best = min(eligible[t], key=lambda c: (load[c], c))
                if load[m] - load[best] > 1:
                    out[m][t].discard(p)
                    out[best].setdefault(t, set()).add(p)
                    load[m] -= 1
                    load[best] += 1
                    owner[(t, p)] = best
                    moved = True
        return _freeze(out)


class RangeAssignor:
    name = "range"

    def assign(self, members: dict[str, MemberSpec], partitions: dict[uuid.UUID, int]) -> dict:
        out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
        for t, n in partitions.items():
            subs = sorted(m for m, spec in members.items() if t in spec.topics)
            if not subs:
                continue
            per, extra = divmod(n, len(subs))
            start = 0
            for i, m in enumerate(subs):
                count = per + (1 if i < extra else 0)
                if count:
                    out[m][t] = set(range(start, start + count))
                start += count
        return _freeze(out)


ASSIGNORS = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
