"""Incremental fetch sessions (KIP-227): `FetchSessionCache` and the per-request `FetchContext`.

A client (consumer or follower) sends Fetch v7+ with `session_id` and `session_epoch`:

    session_id  session_epoch  meaning
    0           -1             sessionless full fetch (no session wanted)
    0            0             full fetch; create a session (response carries its id, or 0
                               when the cache has no room)
    S           -1             close session S, then a sessionless full fetch
    S            0             close session S, then full fetch creating a new session
    S            N > 0         incremental fetch on session S; N must equal the session's
                               epoch (1 after creation, +1 per request, wrapping to 1)

Incremental requests list only partitions whose fetch state changed (new partitions join the
session, `forgotten_topics_data` leave it); the broker answers only partitions with something
to say: records, a changed high watermark, last stable offset or log start offset, an error,
or a preferred read replica (Kafka's CachedPartition.maybeUpdateResponseData). Returned
partitions move to the end of the session order so large partitions cannot starve the rest.

What an incremental fetch reads (issue 21; Kafka reads every partition of the session, which
makes an idle session cost in proportion to its size): the partitions the request lists, the
partitions the ReplicaManager reported changed since the last read (`partition_changed`:
appends, high watermark moves, leadership changes, deletion), and the partitions left
"pending" by the last read (an error, records returned, or data beyond the fetch offset not
returned, e.g. for lack of response bytes). A partition read caught up (fetch offset at the
end of what it may read) and unchanged since has nothing new to say and is skipped. Log start
offset moves made outside the fetch path (retention, DeleteRecords) report no change; a light
sweep every `SWEEP_MS` (30 s) compares each partition's log start offset with the one last
sent (`sweep(lookup)`). A parked incremental fetch (`waiter`) watches one purgatory key,
`FetchSessionKey(session id)`: a change to any of its partitions adds that partition to it.

Errors (top-level, no partitions, session id 0): FETCH_SESSION_ID_NOT_FOUND (unknown S),
INVALID_FETCH_SESSION_EPOCH (N differs), FETCH_SESSION_TOPIC_ID_ERROR (a session created
with topic ids, Fetch v13+, used by a request without them, or the reverse).

Capacity: `max.incremental.fetch.session.cache.slots` (1000) sessions. When full, a new
session may evict a session unused for `eviction_ms` (120 s), else the least valuable one:
follower (privileged) sessions outrank consumer sessions, then more partitions outrank
fewer, then the more recently used wins (Kafka's FetchSessionCache.tryEvict). Time via
`time_ms` (ms).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable

from broker.purgatory.delayed_fetch import FetchPartitionData, PartitionFetchInfo
from protocol.errors import ErrorCode

__all__ = ["CachedPartition", "FetchContext", "FetchSession", "FetchSessionCache",
           "INVALID_SESSION_ID", "INITIAL_EPOCH", "FINAL_EPOCH", "next_epoch"]

INVALID_SESSION_ID = 0
SWEEP_MS = 30_000
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 0x7FFFFFFF
DEFAULT_EVICTION_MS = 120_000
TOPIC_ID_MIN_VERSION = 13

TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (KIP-227): FINAL stays FINAL, INT32_MAX wraps to 1."""
    if epoch < 0:
        return epoch
    return 1 if epoch == INT32_MAX else epoch + 1


class CachedPartition:
    """A partition of a session: the client's fetch state plus what was last sent."""

    __slots__ = ("topic", "partition", "topic_id", "fetch_offset", "max_bytes",
                 "current_leader_epoch", "log_start_offset", "last_fetched_epoch",
                 "high_watermark", "last_stable_offset", "leader_log_start_offset", "seq",
                 "hosted", "end_bytes")

    def __init__(self, topic: str, partition: int, topic_id: uuid.UUID | None,
                 info: PartitionFetchInfo, seq: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.leader_log_start_offset = -1
        self.seq = seq  # position in the session order (smaller = earlier)
        # after a caught-up read: the Partition read and its byte counter then (the start of
        # a parked fetch's count for this partition); None = unknown, read it again
        self.hosted = None
        self.end_bytes = -1
        self.update_request(info)

    def update_request(self, info: PartitionFetchInfo) -> None:
        self.fetch_offset = info.fetch_offset
        self.max_bytes = info.max_bytes
        self.current_leader_epoch = info.current_leader_epoch
        self.log_start_offset = info.log_start_offset
        self.last_fetched_epoch = info.last_fetched_epoch

    def fetch_info(self) -> PartitionFetchInfo:
        return PartitionFetchInfo(self.fetch_offset, self.max_bytes, self.current_leader_epoch,
                                  self.log_start_offset, self.last_fetched_epoch)

    def maybe_update_response_data(self, data: FetchPartitionData, update: bool) -> bool:
        """True if an incremental response must carry this partition; with `update` the
        cached high watermark / LSO / log start offset take the new values (an error resets
        the HW to -1 so the partition is sent again next time)."""
        must = len(data.records) > 0 if data.records is not None else False
        if data.high_watermark != self.high_watermark:
            must = True
            if update:
                self.high_watermark = data.high_watermark
        if data.log_start_offset != self.leader_log_start_offset:
            must = True
            if update:
                self.leader_log_start_offset = data.log_start_offset
        if data.last_stable_offset != self.last_stable_offset:
            must = True
            if update:
                self.last_stable_offset = data.last_stable_offset
        if data.preferred_read_replica >= 0 or data.diverging_epoch is not None:
            must = True
        if data.error != ErrorCode.NONE:
            must = True
            if update:
                self.high_watermark = -1
        return must

    def note_read(self, data: FetchPartitionData) -> bool:
        """After a read of this partition: True if it must be read again at the next fetch
        even without a change (an error, records returned, or data left beyond the fetch
        offset); else remember the partition and its byte counter (caught up)."""
        if data.error != ErrorCode.NONE or data.end_offset < 0 or \
                data.diverging_epoch is not None or data.preferred_read_replica >= 0 or \
                self.fetch_offset < data.end_offset or \
                (data.records is not None and len(data.records) > 0):
            self.hosted = None
            return True
        self.hosted = data.partition
        self.end_bytes = data.end_bytes
        return False


class FetchSession:
    """A cached session: `partitions` in session order, keyed by (topic, partition)."""

    __slots__ = ("id", "privileged", "partitions", "uses_topic_ids", "created_ms",
                 "last_used_ms", "epoch", "changed", "pending", "waiter", "next_seq",
                 "swept_ms", "swept_stamp")

    def __init__(self, session_id: int, privileged: bool, partitions: dict,
                 uses_topic_ids: bool, now_ms: int) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions: dict[TopicPartition, CachedPartition] = partitions
        self.uses_topic_ids = uses_topic_ids
        self.created_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.changed: set[TopicPartition] = set()  # reported changed since their last read
        self.pending: set[TopicPartition] = set()  # to read again (see CachedPartition.note_read)
        self.waiter = None  # the parked DelayedFetch of this session, if any
        self.next_seq = len(partitions)
        self.swept_ms = now_ms
        self.swept_stamp = None  # the replica change stamp the last sweep saw

    def __len__(self) -> int:
        return len(self.partitions)

    def update(self, fetch_data: Iterable[tuple[TopicPartition, PartitionFetchInfo,
                                                 uuid.UUID | None]],
               to_forget: Iterable[TopicPartition]) -> tuple[list, list]:
        """Apply an incremental request; returns (partitions added, partitions removed)."""
        parts = self.partitions
        added, removed = [], []
        for tp, info, topic_id in fetch_data:
            cached = parts.get(tp)
            if cached is None:
                parts[tp] = CachedPartition(tp[0], tp[1], topic_id, info, self.next_seq)
                self.next_seq += 1
                added.append(tp)
            else:
                cached.update_request(info)
                if topic_id is not None:
                    cached.topic_id = topic_id
        for tp in to_forget:
            if parts.pop(tp, None) is not None:
                removed.append(tp)
                self.changed.discard(tp)
                self.pending.discard(tp)
        return added, removed

    def move_to_end(self, tp: TopicPartition, cached: CachedPartition) -> None:
        del self.partitions[tp]
        self.partitions[tp] = cached
        cached.seq = self.next_seq
        self.next_seq += 1

    def sweep(self, lookup: Callable, now_ms: int, stamp=None) -> None:
        """Mark changed the partitions whose log start offset moved without a reported change
        (retention, DeleteRecords); `lookup(topic, partition)` gives the hosted Partition.
        `stamp`: `ReplicaManager.replica_change_stamp()`; the same value as at the last
        sweep means nothing it could find changed, and the partitions are not looked at."""
        self.swept_ms = now_ms
        if stamp is not None:
            if stamp == self.swept_stamp:
                return
            self.swept_stamp = stamp
        changed = self.changed
        for tp, c in self.partitions.items():
            part = lookup(*tp)
            if part is None or part is not c.hosted or \
                    part.log_start_offset != c.leader_log_start_offset:
                changed.add(tp)

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, epoch={self.epoch}, partitions={len(self)}, "
                f"privileged={self.privileged})")


def _seq(c: CachedPartition) -> int:
    return c.seq


class FetchContext:
    """What one Fetch request does with sessions. `kind` is "sessionless", "full",
    "incremental" or "error" (then `error` is the top-level code and nothing is fetched)."""

    def __init__(self, kind: str, cache: FetchSessionCache, *, error: int = ErrorCode.NONE,
                 fetch_data: list | None = None, session: FetchSession | None = None,
                 privileged: bool = False, uses_topic_ids: bool = False) -> None:
        self.kind = kind
        self.cache = cache
        self.error = error
        self.fetch_data = fetch_data or []
        self.session = session
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.topic_ids: dict[TopicPartition, uuid.UUID | None] = \
            {tp: tid for tp, _, tid in self.fetch_data}

    def partitions_to_fetch(self, lookup: Callable | None = None,
                            stamp_of: Callable | None = None
                            ) -> list[tuple[TopicPartition, PartitionFetchInfo]]:
        """The partitions to read, in response order: the request's (full/sessionless), or
        for an incremental fetch the listed, changed and pending partitions of the session in
        session order (see the module docstring; `lookup(topic, partition)` -> Partition
        enables the log start sweep; `stamp_of()`, read only when a sweep is due, lets it
        skip when nothing changed, see `FetchSession.sweep`). Clears the session's changed
        set: changes reported from now on are read by the next fetch (or join this one's
        DelayedFetch)."""
        if self.kind == "error":
            return []
        if self.kind != "incremental":
            return [(tp, info) for tp, info, _ in self.fetch_data]
        session = self.session
        parts = session.partitions
        if lookup is not None:
            now = self.cache.time_ms()
            if now - session.swept_ms >= SWEEP_MS:
                session.sweep(lookup, now, stamp_of() if stamp_of is not None else None)
        wanted = session.changed
        session.changed = set()
        wanted.update(session.pending)
        wanted.update(tp for tp, _, _ in self.fetch_data)
        chosen = [c for c in map(parts.get, wanted) if c is not None]
        if len(chosen) > 1:
            chosen.sort(key=_seq)
        return [((c.topic, c.partition), c.fetch_info()) for c in chosen]

    def topic_id(self, tp: TopicPartition) -> uuid.UUID | None:
        if self.kind == "incremental":
            c = self.session.partitions.get(tp)
            return c.topic_id if c is not None else None
        return self.topic_ids.get(tp)

    def update_and_generate_response_data(
            self, results: dict[TopicPartition, FetchPartitionData]
    ) -> tuple[int, list[tuple[TopicPartition, FetchPartitionData]]]:
        """(session id for the response, partitions to send in order). A full context
        creates its session here (after the read, with the values just sent)."""
        if self.kind == "error":
            return INVALID_SESSION_ID, []
        if self.kind == "sessionless":
            return INVALID_SESSION_ID, [(tp, results[tp]) for tp, _, _ in self.fetch_data
                                        if tp in results]
        if self.kind == "full":
            out = [(tp, results[tp]) for tp, _, _ in self.fetch_data if tp in results]

            def build() -> tuple[dict, set]:
                parts = {}
                pending = set()
                for tp, info, tid in self.fetch_data:
                    c = CachedPartition(tp[0], tp[1], tid, info, len(parts))
                    r = results.get(tp)
                    if r is not None:
                        c.maybe_update_response_data(r, True)
                        if c.note_read(r):
                            pending.add(tp)
                    else:
                        pending.add(tp)
                    parts[tp] = c
                return parts, pending

            sid = self.cache.maybe_create_session(self.privileged, len(self.fetch_data),
                                                  self.uses_topic_ids, build)
            return sid, out
        session = self.session
        parts = session.partitions
        pending = session.pending
        out = []
        for tp, r in results.items():
            c = parts.get(tp)
            if c is None:
                continue
            if c.note_read(r):
                pending.add(tp)
            else:
                pending.discard(tp)
            if c.maybe_update_response_data(r, True):
                out.append((tp, r))
                session.move_to_end(tp, c)  # no starvation (KIP-227)
        if len(out) > 1:
            out.sort(key=lambda x: parts[x[0]].seq)
        return session.id, out


class FetchSessionCache:
    """Sessions by id, at most `max_entries` (`max.incremental.fetch.session.cache.slots`)."""

    def __init__(self, max_entries: int = 1000, eviction_ms: int = DEFAULT_EVICTION_MS,
                 time_ms: Callable[[], int] = _now_ms, rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.time_ms = time_ms
        self._rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        # partition -> the sessions holding it (for partition_changed)
        self._watchers: dict[TopicPartition, set[FetchSession]] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        return sum(len(s) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self._unwatch(session, session.partitions)
        return session

    def _watch(self, session: FetchSession, tps: Iterable[TopicPartition]) -> None:
        watchers = self._watchers
        for tp in tps:
            w = watchers.get(tp)
            if w is None:
                w = watchers[tp] = set()
            w.add(session)

    def _unwatch(self, session: FetchSession, tps: Iterable[TopicPartition]) -> None:
        watchers = self._watchers
        for tp in tps:
            w = watchers.get(tp)
            if w is not None:
                w.discard(session)
                if not w:
                    del watchers[tp]

    def holds(self, tp: TopicPartition) -> bool:
        """True if some session holds `tp`."""
        return tp in self._watchers

    def partition_changed(self, tp: TopicPartition) -> list[FetchSession]:
        """`tp` got records, a new high watermark / LSO / log start offset, a leadership
        change or was removed: each session holding it reads it at its next fetch, or its
        parked fetch takes it in. Returns the sessions whose parked fetch must be checked
        (purgatory key `FetchSessionKey(session.id)`)."""
        w = self._watchers.get(tp)
        if not w:
            return []
        woken = []
        for session in w:
            waiter = session.waiter
            if waiter is not None and not waiter.is_completed:
                waiter.add_partition(tp, session.partitions[tp])
                woken.append(session)
            else:
                session.changed.add(tp)
        return woken

    def new_context(self, version: int, session_id: int, session_epoch: int,
                    fetch_data: list[tuple[TopicPartition, PartitionFetchInfo,
                                           uuid.UUID | None]],
                    forgotten: list[TopicPartition], is_from_follower: bool) -> FetchContext:
        """The context of one request (Kafka's FetchManager.newContext); see the module
        docstring for the session-id/epoch table. `fetch_data` entries are
        ((topic, partition), info, topic_id or None)."""
        uses_topic_ids = version >= TOPIC_ID_MIN_VERSION
        if version < 7 or session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            if version < 7 or session_epoch == FINAL_EPOCH:
                return FetchContext("sessionless", self, fetch_data=fetch_data)
            return FetchContext("full", self, fetch_data=fetch_data,
                                privileged=is_from_follower, uses_topic_ids=uses_topic_ids)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext("error", self, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != session_epoch:
            return FetchContext("error", self, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext("error", self, error=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        waiter = session.waiter
        if waiter is not None:  # the previous fetch still parked (a client not waiting for
            waiter.force_complete()  # its answer): answer it now, its partitions go with it
        added, removed = session.update(fetch_data, forgotten)
        if added:
            self._watch(session, added)
        if removed:
            self._unwatch(session, removed)
        if not session.partitions:
            self.remove(session.id)
            return FetchContext("sessionless", self, fetch_data=fetch_data)
        session.last_used_ms = self.time_ms()
        session.epoch = next_epoch(session.epoch)
        return FetchContext("incremental", self, fetch_data=fetch_data, session=session,
                            uses_topic_ids=uses_topic_ids)

    def maybe_create_session(self, privileged: bool, size: int, uses_topic_ids: bool,
                             build: Callable[[], tuple[dict, set]]) -> int:
        """A new session id (its partitions and pending set from `build()`), or
        INVALID_SESSION_ID (0) when the cache is disabled or full of more valuable sessions."""
        if self.max_entries <= 0:
            return INVALID_SESSION_ID
        now = self.time_ms()
        if len(self.sessions) >= self.max_entries and \
                not self._try_evict(privileged, size, now):
            return INVALID_SESSION_ID
        sid = self._new_session_id()
        parts, pending = build()
        session = self.sessions[sid] = FetchSession(sid, privileged, parts, uses_topic_ids, now)
        session.pending = pending
        self._watch(session, parts)
        return sid

    def _new_session_id(self) -> int:
        while True:
            sid = self._rng.randint(1, INT32_MAX)
            if sid not in self.sessions:
                return sid

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        stale = [s for s in self.sessions.values() if now - s.last_used_ms > self.eviction_ms]
        if stale:
            victim = min(stale, key=lambda s: s.last_used_ms)
        else:
            victim = min(self.sessions.values(),
                         key=lambda s: (s.privileged, len(s), s.last_used_ms))
            if victim.privileged and not privileged:
                return False
            if not privileged and size <= len(victim):
                return False
            if privileged and victim.privileged and size <= len(victim):
                return False
        self.remove(victim.id)
        self.evictions += 1
        return True
