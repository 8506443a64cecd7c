"""Per-partition fetch states of the replica fetchers (Kafka's InitialFetchState and
PartitionFetchState): where a follower starts, and where each partition stands in its
fetcher (offset, leader epoch, TRUNCATING / FETCHING, last fetched epoch, lag, back-off)."""

from __future__ import annotations

import dataclasses
import uuid

__all__ = ["InitialFetchState", "PartitionFetchState", "TRUNCATING", "FETCHING",
           "UNDEFINED_EPOCH"]

TRUNCATING = "Truncating"
FETCHING = "Fetching"
UNDEFINED_EPOCH = -1


@dataclasses.dataclass(slots=True)
class InitialFetchState:
    """Where a follower starts: the leader, its epoch, and the offset (LEO when the log
    knows its latest epoch, else the HW)."""

    topic_id: uuid.UUID | None
    leader_id: int
    current_leader_epoch: int
    init_offset: int


@dataclasses.dataclass(slots=True)
class PartitionFetchState:
    topic_id: uuid.UUID | None
    fetch_offset: int
    current_leader_epoch: int
    state: str
    last_fetched_epoch: int = UNDEFINED_EPOCH
    lag: int | None = None
    delay_until: float = 0.0  # loop.time() before which the partition rests after an error

    def is_delayed(self, now: float) -> bool:
        return now < self.delay_until

    @property
    def in_sync(self) -> bool:
        return self.lag is not None and self.lag <= 0
