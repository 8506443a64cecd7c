"""`FetchSessionHandler`: the follower's side of KIP-227 incremental fetch sessions, one per
ReplicaFetcher (Kafka's clients FetchSessionHandler as used by ReplicaFetcherThread).

The handler remembers what the leader's session holds: for each partition the last
`PartitionSpec` sent (topic id, fetch offset, log start offset, max bytes, current leader
epoch, last fetched epoch). Each round the fetcher hands it the partitions that may have
changed (`build(changed, full_view)`):

- no session yet (session id 0, epoch 0 = INITIAL): a **full** fetch listing every ready
  partition with ``session_epoch`` 0; the leader's answer carries the new session id (0 when
  its cache has no room: the next fetch is full again);
- otherwise an **incremental** fetch with the session id and the next epoch (1, 2, ...
  wrapping to 1 after 2^31-1) listing only partitions added or whose spec changed, and
  naming in ``forgotten_topics_data`` the partitions that left (removed, backing off after an
  error, or not ready), as Kafka's Builder does; an unchanged partition costs nothing.

`handle_response` (Kafka's handleResponse): FETCH_SESSION_ID_NOT_FOUND -> the next fetch is
full with a new session (session id 0, epoch 0); INVALID_FETCH_SESSION_EPOCH,
FETCH_SESSION_TOPIC_ID_ERROR or any other top-level error -> close the session and open a
new one (our session id, epoch 0: the leader drops it and answers a full fetch); an answer
naming a partition the session does not hold -> the same; session id 0 in an answer -> the
leader keeps no session, the next fetch is full. `handle_error` (a lost connection, a
timeout) closes and reopens the same way. A switch between topic names and topic ids
(Fetch v13+) also starts a new session (KIP-516).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable
from typing import NamedTuple

from protocol.errors import ErrorCode

__all__ = ["FetchSessionHandler", "FetchRequestData", "PartitionSpec", "INITIAL_EPOCH",
           "FINAL_EPOCH", "INVALID_SESSION_ID"]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 0x7FFFFFFF

TopicPartition = tuple[str, int]


class PartitionSpec(NamedTuple):
    """What a fetch says about one partition (Kafka's FetchRequest.PartitionData); equal
    specs are not resent in an incremental fetch (a tuple: one made per changed partition
    per fetch)."""

    topic_id: uuid.UUID | None
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int


@dataclasses.dataclass(slots=True)
class FetchRequestData:
    """One fetch to send: `to_send` (partitions listed in the request), `to_forget`,
    `session` (every partition the leader's session holds after this request, by the
    fetcher's own view: what the answer may name), session id / epoch to put in the
    request, and whether the session is full (`full`)."""

    to_send: dict[TopicPartition, PartitionSpec]
    to_forget: list[TopicPartition]
    session: dict[TopicPartition, PartitionSpec]
    session_id: int
    session_epoch: int
    full: bool


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


class FetchSessionHandler:
    """See the module docstring. `sessions_enabled` False sends sessionless full fetches
    (session id 0, epoch -1), as a leader without Fetch v7 requires."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[TopicPartition, PartitionSpec] = {}
        self.uses_topic_ids: bool | None = None
        self.topic_names: dict[uuid.UUID, str] = {}  # topic id -> name (Fetch v13+ answers)
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.full_fetches = 0
        self.incremental_fetches = 0

    def __repr__(self) -> str:
        return (f"FetchSessionHandler(node={self.node_id}, session={self.session_id}, "
                f"epoch={self.epoch}, partitions={len(self.partitions)})")

    @property
    def needs_full(self) -> bool:
        """True when the next fetch must list every partition (no session yet)."""
        return self.epoch == INITIAL_EPOCH or self.session_id == INVALID_SESSION_ID

    def build(self, changed: Iterable[TopicPartition],
              spec_for: Callable[[TopicPartition], PartitionSpec | None],
              all_partitions: Callable[[], Iterable[TopicPartition]],
              uses_topic_ids: bool, sessions_enabled: bool = True) -> FetchRequestData:
        """The next fetch. `spec_for(tp)` is the spec to send now, or None when `tp` is not
        to be fetched (gone, backing off, truncating); `changed` names every partition whose
        spec may differ from what the session holds; `all_partitions()` is consulted only
        for a full fetch."""
        if self.uses_topic_ids is not None and uses_topic_ids != self.uses_topic_ids:
            self.close_and_reopen()
        self.uses_topic_ids = uses_topic_ids
        if not sessions_enabled or self.needs_full:
            session: dict[TopicPartition, PartitionSpec] = {}
            for tp in all_partitions():
                spec = spec_for(tp)
                if spec is not None:
                    session[tp] = spec
                    if spec.topic_id is not None:
                        self._learn(tp[0], spec.topic_id)
            self.partitions = session
            self.full_fetches += 1
            if not sessions_enabled:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
                return FetchRequestData(session, [], session, INVALID_SESSION_ID, FINAL_EPOCH,
                                        True)
            return FetchRequestData(session, [], session, self.session_id, INITIAL_EPOCH, True)
        session = self.partitions
        to_send: dict[TopicPartition, PartitionSpec] = {}
        to_forget: list[TopicPartition] = []
        for tp in changed:
            spec = spec_for(tp)
            prev = session.get(tp)
            if spec is None:
                if prev is not None:
                    del session[tp]
                    to_forget.append(tp)
            elif prev != spec:  # added, or changed (a new topic id included)
                session[tp] = spec
                to_send[tp] = spec
                if spec.topic_id is not None and (prev is None or prev.topic_id != spec.topic_id):
                    self._learn(tp[0], spec.topic_id)
        self.incremental_fetches += 1
        return FetchRequestData(to_send, to_forget, session, self.session_id, self.epoch, False)

    def _learn(self, topic: str, topic_id: uuid.UUID) -> None:
        old = self.topic_ids.get(topic)
        if old != topic_id:
            if old is not None:
                self.topic_names.pop(old, None)
            self.topic_ids[topic] = topic_id
            self.topic_names[topic_id] = topic

    def handle_response(self, error_code: int, session_id: int,
                        names: Iterable[TopicPartition], full: bool) -> bool:
        """Update the session from an answer to a `full` or incremental fetch (`names`: the
        partitions it carries). False when the answer must be ignored (a top-level error or
        a partition outside the session): the next fetch opens a new session."""
        if error_code != ErrorCode.NONE:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            else:
                self.close_and_reopen()
            return False
        session = self.partitions
        if any(tp not in session for tp in names):
            if full:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            else:
                self.close_and_reopen()
            return False
        if session_id == INVALID_SESSION_ID:
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif full:
            self.session_id, self.epoch = session_id, _next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = _next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The fetch failed without an answer: close the session, open a new one."""
        self.close_and_reopen()

    def close_and_reopen(self) -> None:
        """Next fetch: our session id with epoch 0 (the leader closes it, creates another)."""
        self.epoch = INITIAL_EPOCH

    def reset(self) -> None:
        """Forget the session entirely (e.g. the leader changed address)."""
        self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        self.partitions = {}
        self.topic_names.clear()
        self.topic_ids.clear()
