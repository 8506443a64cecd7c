"""Share sessions (KIP-932 "Share sessions"; Kafka's ShareSessionCache / ShareSessionContext).

A share consumer keeps one share session per broker, keyed by (group id, member id). The
session holds the share-partitions the member fetches from that broker, so later ShareFetch
requests list only changes (incremental). ``ShareSessionEpoch``:

    0       open a session: an existing one for the same key is replaced (and its acquired
            records released); the request's partitions are the session. Acknowledgements
            in an opening request are INVALID_REQUEST.
    n > 0   the next request of the session: must equal the session's epoch, else
            INVALID_SHARE_SESSION_EPOCH; no session: SHARE_SESSION_NOT_FOUND. The request's
            partitions are added, ``ForgottenTopicsData`` removed; the epoch then increments
            (wrapping from 2^31-1 to 1).
    -1      final: acknowledge, then close the session (its acquired records are released).
            Fetch data in a final ShareFetch is INVALID_REQUEST; no session:
            SHARE_SESSION_NOT_FOUND.

ShareAcknowledge uses the same epochs but never opens a session (epoch 0 is
INVALID_SHARE_SESSION_EPOCH). At most ``group.share.max.share.sessions`` sessions live on a
broker: a new one past that evicts the least recently used session idle for longer than
``EVICTION_IDLE_MS`` (released like a closed one), else answers SHARE_SESSION_LIMIT_REACHED.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable

from protocol.errors import ErrorCode, KafkaError

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "ShareSession", "ShareSessionCache"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: a session idle this long may be evicted to make room for a new one (ms)
EVICTION_IDLE_MS = 120_000

SharePartitionId = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


class ShareSession:
    __slots__ = ("group_id", "member_id", "epoch", "partitions", "last_used_ms")

    def __init__(self, group_id: str, member_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.epoch = 1
        #: (topic id, partition) -> topic name, in the order they joined the session
        self.partitions: dict[SharePartitionId, str] = {}
        self.last_used_ms = now_ms

    @property
    def key(self) -> tuple[str, str]:
        return self.group_id, self.member_id


class ShareSessionCache:
    """The broker's share sessions (see the module docstring). ``on_close(session)`` is
    called for every session that closes, is replaced or evicted (release its records)."""

    def __init__(self, max_sessions: int = 2000,
                 on_close: Callable[[ShareSession], None] | None = None,
                 time_ms: Callable[[], int] | None = None) -> None:
        self.max_sessions = max_sessions
        self.on_close = on_close
        self._time_ms = time_ms or (lambda: int(time.monotonic() * 1000))
        self._sessions: OrderedDict[tuple[str, str], ShareSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    def open(self, group_id: str, member_id: str,
             partitions: Iterable[tuple[SharePartitionId, str]]) -> ShareSession:
        """Epoch 0: a new session (replacing any); SHARE_SESSION_LIMIT_REACHED when full."""
        now = self._time_ms()
        old = self._sessions.pop((group_id, member_id), None)
        if old is not None:
            self._closed(old)
        if len(self._sessions) >= self.max_sessions and not self._evict(now):
            raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                             f"The share session cache is full ({self.max_sessions} sessions).")
        s = ShareSession(group_id, member_id, now)
        s.partitions.update(partitions)
        self._sessions[s.key] = s
        return s

    def next(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """Epoch n > 0: the session, epoch checked and advanced."""
        s = self._check(group_id, member_id, epoch)
        s.epoch = next_epoch(s.epoch)
        s.last_used_ms = self._time_ms()
        self._sessions.move_to_end(s.key)
        return s

    def close(self, group_id: str, member_id: str) -> ShareSession:
        """Epoch -1: remove the session (SHARE_SESSION_NOT_FOUND if there is none)."""
        s = self._sessions.pop((group_id, member_id), None)
        if s is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                             f"No share session for member {member_id} of group {group_id}.")
        self._closed(s)
        return s

    def remove_member(self, group_id: str, member_id: str) -> None:
        """The member left or was fenced from its group: close its session if any."""
        s = self._sessions.pop((group_id, member_id), None)
        if s is not None:
            self._closed(s)

    def _check(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        s = self._sessions.get((group_id, member_id))
        if s is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                             f"No share session for member {member_id} of group {group_id}.")
        if s.epoch != epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             f"Expected share session epoch {s.epoch}, got {epoch}.")
        return s

    def check(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        return self._check(group_id, member_id, epoch)

    def _evict(self, now: int) -> bool:
        for key, s in self._sessions.items():
            if now - s.last_used_ms >= EVICTION_IDLE_MS:
                del self._sessions[key]
                self._closed(s)
                return True
            break  # ordered by last use: the oldest is not idle enough
        return False

    def _closed(self, s: ShareSession) -> None:
        if self.on_close is not None:
            self.on_close(s)
