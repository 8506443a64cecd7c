"""Replication throttles (KIP-73, Kafka's ReplicationQuotaManager).

Two instances per broker: the leader quota (bytes this broker sends to followers of
throttled partitions, `leader.replication.throttled.rate`) and the follower quota (bytes it
fetches for throttled partitions, `follower.replication.throttled.rate`); rates in bytes per
second, default unlimited. Which partitions are throttled comes from the topic configs
`leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`: `*`
(every partition of the topic) or a list of `partition:broker` entries of which only those
naming this broker count (Kafka's ConfigHandler.parseThrottledPartitions).

The rate is measured over `replication.quota.window.num` windows of
`replication.quota.window.size.seconds` (11 x 1 s by default), as Kafka's sampled Rate:
bytes recorded in the retained windows divided by the time they span (at least one full
window). Throttling is all-or-nothing per fetch: while the rate is above the bound the leader
returns no data for throttled partitions to out-of-sync followers, and a follower leaves its
throttled, out-of-sync partitions out of its fetch requests; in-sync replicas are never
throttled.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["ReplicationQuotaManager", "parse_throttled_partitions", "ALL_PARTITIONS",
           "UNLIMITED"]

UNLIMITED = (1 << 63) - 1
ALL_PARTITIONS = frozenset({-1})


def parse_throttled_partitions(value: str | None, broker_id: int) -> frozenset[int]:
    """`*` -> ALL_PARTITIONS; `0:101,1:102` -> the partitions listed with `broker_id`;
    empty/None -> none. Malformed entries are skipped (the controller validates them)."""
    value = (value or "").strip()
    if not value:
        return frozenset()
    if value == "*":
        return ALL_PARTITIONS
    out = set()
    for entry in value.split(","):
        parts = entry.strip().split(":")
        if len(parts) != 2:
            continue
        try:
            p, b = int(parts[0]), int(parts[1])
        except ValueError:
            continue
        if b == broker_id:
            out.add(p)
    return frozenset(out)


class ReplicationQuotaManager:
    """See the module docstring. `clock()` returns seconds (monotonic)."""

    def __init__(self, rate_bytes_per_s: int = UNLIMITED, window_num: int = 11,
                 window_size_s: float = 1.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.bound = rate_bytes_per_s
        self.window_num = max(window_num, 1)
        self.window_size_s = max(window_size_s, 0.001)
        self.clock = clock
        self._samples: list[list[float]] = []  # [window start, bytes]
        self._throttled: dict[str, frozenset[int]] = {}

    # --- configuration ------------------------------------------------------------------------
    def update_quota(self, rate_bytes_per_s: int) -> None:
        self.bound = rate_bytes_per_s if rate_bytes_per_s > 0 else UNLIMITED

    def mark_throttled(self, topic: str, partitions: frozenset[int]) -> None:
        if partitions:
            self._throttled[topic] = partitions
        else:
            self._throttled.pop(topic, None)

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def throttles_any(self) -> bool:
        """True when a rate is set and some partition is throttled (KIP-73)."""
        return self.bound != UNLIMITED and bool(self._throttled)

    def is_throttled(self, topic: str, partition: int) -> bool:
        parts = self._throttled.get(topic)
        return parts is not None and (parts is ALL_PARTITIONS or partition in parts)

    # --- measurement ----------------------------------------------------------------------------
    def record(self, nbytes: int) -> None:
        now = self.clock()
        samples = self._samples
        if not samples or now - samples[-1][0] >= self.window_size_s:
            samples.append([now, 0.0])
            if len(samples) > self.window_num:
                del samples[0]
        samples[-1][1] += nbytes

    def rate(self) -> float:
        """Bytes per second over the retained windows."""
        now = self.clock()
        horizon = now - self.window_num * self.window_size_s
        samples = [s for s in self._samples if s[0] > horizon]
        self._samples = samples
        if not samples:
            return 0.0
        elapsed = max(now - samples[0][0], self.window_size_s)
        return sum(s[1] for s in samples) / elapsed

    def is_quota_exceeded(self) -> bool:
        return self.bound != UNLIMITED and self.rate() > self.bound
