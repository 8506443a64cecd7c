"""What the KIP-848 heartbeat coordinators (consumer groups: ``consumer_coordinator``; share
groups: ``share_groups``) share: the cluster's topics as they see them (``TopicView``), the
answer of one heartbeat (``HeartbeatResult``: error and message, or member id, member epoch,
heartbeat interval in ms and the assignment ``{topic_id: frozenset[partition]}``, None when
unchanged), the failure a step raises to answer an error code with a message
(``HeartbeatError``) and ``LEAVE_EPOCH`` (-1: the member leaves, KIP-848).
"""

from __future__ import annotations

import uuid

from protocol.errors import ErrorCode

__all__ = ["LEAVE_EPOCH", "HeartbeatError", "HeartbeatResult", "TopicView"]

E = ErrorCode
LEAVE_EPOCH = -1


class TopicView:
    """The cluster's topics as the coordinator sees them: ``lookup(name) -> (id, count) |
    None``, ``name_of(id)``, ``names()``. Built over a MetadataCache, or a dict in tests."""

    def __init__(self, cache=None, topics: dict[str, tuple[uuid.UUID, int]] | None = None):
        self.cache = cache
        self.topics = topics

    def lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        if self.topics is not None:
            return self.topics.get(name)
        n = self.cache.num_partitions(name)
        tid = self.cache.topic_id(name)
        return None if n is None or tid is None else (tid, n)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        if self.topics is not None:
            return next((n for n, (t, _) in self.topics.items() if t == topic_id), None)
        return self.cache.topic_name(topic_id)

    def names(self):
        return list(self.topics) if self.topics is not None else self.cache.all_topics()


class HeartbeatResult:
    __slots__ = ("error", "message", "member_id", "member_epoch", "heartbeat_interval_ms",
                 "assignment")

    def __init__(self, error=E.NONE, message=None, member_id=None, member_epoch=0,
                 heartbeat_interval_ms=0, assignment=None) -> None:
        self.error = error
        self.message = message
        self.member_id = member_id
        self.member_epoch = member_epoch
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.assignment = assignment  # {topic_id: frozenset} or None = unchanged

    def __repr__(self) -> str:
        return (f"HeartbeatResult({self.error.name}, {self.message!r}, member={self.member_id}, "
                f"epoch={self.member_epoch}, assignment={self.assignment})")


class HeartbeatError(Exception):
    """Answer the heartbeat with ``error`` (an ErrorCode) and ``message``."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
