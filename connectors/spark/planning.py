"""Pure offset arithmetic for planning micro-batches (no I/O, unit-testable).

Offsets are "next offset to read" per (topic, partition), as in Kafka's committed offsets
and Spark's Kafka source: a range [from_offset, until_offset) holds until - from offsets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TP = tuple[str, int]


@dataclass(frozen=True)
class OffsetRange:
    """One topic-partition's offsets [from_offset, until_offset) read by one Spark task."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


def rate_limit(start: dict[TP, int], end: dict[TP, int], max_offsets: int) -> dict[TP, int]:
    """Cap ``end`` so that at most ``max_offsets`` offsets are planned over all partitions.

    The budget is shared in proportion to each partition's backlog (``end - start``), as
    Spark's ``maxOffsetsPerTrigger`` does; what the integer division leaves over goes one
    offset at a time to the partitions with the largest remainders (ties: lowest topic and
    partition first), so exactly ``min(max_offsets, total backlog)`` offsets are planned and
    a non-empty backlog always makes progress. Partitions absent from ``start`` start at 0.
    """
    lags = {tp: max(0, until - start.get(tp, 0)) for tp, until in end.items()}
    total = sum(lags.values())
    if total <= max_offsets:
        return dict(end)
    shares = {tp: lag * max_offsets // total for tp, lag in lags.items()}
    leftover = max_offsets - sum(shares.values())
    by_remainder = sorted(lags, key=lambda tp: (-(lags[tp] * max_offsets % total), tp))
    for tp in by_remainder:
        if leftover == 0:
            break
        if shares[tp] < lags[tp]:
            shares[tp] += 1
            leftover -= 1
    return {tp: (end[tp] if lags[tp] == 0 else start.get(tp, 0) + shares[tp]) for tp in end}


def plan_ranges(start: dict[TP, int], end: dict[TP, int]) -> list[OffsetRange]:
    """One :class:`OffsetRange` per partition of ``end`` with something to read, sorted."""
    ranges = []
    for (topic, partition), until in sorted(end.items()):
        begin = start.get((topic, partition), 0)
        if until > begin:
            ranges.append(OffsetRange(topic, partition, begin, until))
    return ranges


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split large ranges so that about ``min_partitions`` tasks read (option
    ``minPartitions``, as Spark's Kafka source computes it).

    With fewer non-empty ranges than ``min_partitions``, each range gets a number of parts
    in proportion to its size (``round(size / total * min_partitions)``, at least 1); the
    ranges that get one part keep it, and the parts left over are shared by the others in
    proportion to their sizes. A range in ``parts`` pieces is cut into equal pieces, the
    last taking the remainder. The result is approximately, not exactly, ``min_partitions``
    ranges, in the input order.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    whole = [r for r in ranges if _parts(r.size, total, min_partitions) == 1]
    split_total = total - sum(r.size for r in whole)
    split_min = max(min_partitions - len(whole), 1)
    out = []
    for r in ranges:
        parts = 1 if r in whole else _parts(r.size, split_total, split_min)
        start, remaining = r.from_offset, r.size
        for i in range(parts):
            piece = remaining // (parts - i)
            remaining -= piece
            if piece:
                out.append(OffsetRange(r.topic, r.partition, start, start + piece))
            start += piece
    return out


def _parts(size: int, total: int, wanted: int) -> int:
    return max(math.floor(size / total * wanted + 0.5), 1)  # Java's Math.round


def flatten(offsets: dict[str, dict[int, int]]) -> dict[TP, int]:
    """``{"t": {0: 5}}`` -> ``{("t", 0): 5}``."""
    return {(t, p): o for t, parts in offsets.items() for p, o in parts.items()}


def nest(offsets: dict[TP, int]) -> dict[str, dict[int, int]]:
    """``{("t", 0): 5}`` -> ``{"t": {0: 5}}``."""
    out: dict[str, dict[int, int]] = {}
    for (t, p), o in offsets.items():
        out.setdefault(t, {})[p] = o
    return out
