"""A classic consumer group member for the ``josef`` tools (blocking, stdlib + project only).

What Kafka's consumer does under ``subscribe()`` (the "eager" rebalance protocol, Kafka
protocol guide "The consumer group protocol", KIP-62, KIP-345, KIP-394):

1. **FindCoordinator** (key type 0) names the group's coordinator; COORDINATOR_NOT_AVAILABLE
   (15) and COORDINATOR_LOAD_IN_PROGRESS (14) are retried every ``retry.backoff.ms``.
2. **JoinGroup** with protocol type ``consumer`` and one protocol, ``range``, whose metadata
   is a ``ConsumerProtocolSubscription``: ``int16 version`` then the v3 body (topics
   ``[string]``, user data ``bytes`` (null), owned partitions ``[topic, [int32]]`` (empty:
   eager members give up everything before rejoining), generation ``int32``, rack
   ``string`` (null)), the layout of Kafka's ``ConsumerProtocol``. kafka-python's consumer
   offers ``range`` too, so a mixed group agrees on it. JoinGroup v4+ answers a new member
   MEMBER_ID_REQUIRED (79) with its member id; the member joins again with it (KIP-394).
   UNKNOWN_MEMBER_ID (25) clears the id and joins again. The request parks on the broker
   until the rebalance completes, so its socket timeout is the rebalance timeout + 5 s.
3. **SyncGroup**: the leader (``leader == member_id``) computes Kafka's RangeAssignor over
   the members' subscriptions and sends every member's ``ConsumerProtocolAssignment``
   (``int16 version`` 3, then ``[topic, [int32 partition]]`` and null user data); followers
   send none. Each member gets its own assignment back. REBALANCE_IN_PROGRESS (27),
   ILLEGAL_GENERATION (22) and UNKNOWN_MEMBER_ID mean "join again".
4. **Heartbeat** from a background thread every ``heartbeat.interval.ms`` (Kafka's default
   3000), never more than ``session.timeout.ms`` / 3 apart. REBALANCE_IN_PROGRESS,
   ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and coordinator errors raise
   :attr:`GroupMember.rejoin_needed`; the caller then commits what it consumed (before
   giving up its partitions, as Kafka's consumer does in ``onJoinPrepare``) and calls
   :meth:`GroupMember.join` again. FENCED_INSTANCE_ID (82) is fatal (another process uses
   the same ``group.instance.id``).
5. **OffsetCommit** (v2-v8) with the generation, member id and (v7+) group instance id.
6. **LeaveGroup** on :meth:`GroupMember.close` for dynamic members; a static member
   (``group.instance.id``) does not leave, as in Kafka (KIP-345: it may come back within
   the session timeout without a rebalance).

RangeAssignor (Kafka's ``RangeAssignor``): per topic, the subscribed members sorted (static
members by instance id first, then the rest by member id) share the partitions in order;
with ``n`` partitions and ``c`` members, member ``i`` gets ``n // c`` partitions plus one
more when ``i < n % c``, starting after the partitions of the members before it.

Threads: the heartbeat thread and the caller share one coordinator connection under a lock;
fetching is the caller's business (another connection). Errors are :class:`ToolError`.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterable

from client.connection import KafkaClient, ToolError, error_name
from protocol.errors import ErrorCode as E
from protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = ["GroupMember", "range_assign", "encode_subscription", "decode_subscription",
           "encode_assignment", "decode_assignment", "PROTOCOL_NAME"]

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
PROTOCOL_TYPE = "consumer"
PROTOCOL_NAME = "range"
CONSUMER_PROTOCOL_VERSION = 3
_VERSION = struct.Struct(">h")

TopicPartition = tuple[str, int]

_COORDINATOR_ERRORS = frozenset({E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR,
                                  E.COORDINATOR_LOAD_IN_PROGRESS})
_REJOIN_ERRORS = frozenset({E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION,
                            E.UNKNOWN_MEMBER_ID})


# --- ConsumerProtocol ---------------------------------------------------------------------
def _versioned(cls, data) -> object:
    buf = bytes(data or b"")
    if len(buf) < 2:
        raise ToolError(f"{cls.__name__}: {len(buf)} bytes is too short")
    (version,) = _VERSION.unpack_from(buf)
    if version < 0:
        raise ToolError(f"{cls.__name__}: negative version {version}")
    # A newer version starts with the fields of the highest one we know (Kafka's
    # ConsumerProtocol reads it as that version).
    try:
        return cls.decode(buf, min(version, cls.max_version), 2)
    except Exception as e:  # noqa: BLE001 - reported as one line
        raise ToolError(f"malformed {cls.__name__} v{version}: {e}") from None


def encode_subscription(topics: Iterable[str], generation_id: int = -1) -> bytes:
    """``int16 version`` (3) + ConsumerProtocolSubscription v3 for ``topics``."""
    sub = ConsumerProtocolSubscription(topics=sorted(set(topics)), user_data=None,
                                       owned_partitions=[], generation_id=generation_id,
                                       rack_id=None)
    return _VERSION.pack(CONSUMER_PROTOCOL_VERSION) + bytes(sub.encode(
        CONSUMER_PROTOCOL_VERSION))


def decode_subscription(data) -> list[str]:
    """Topics of a ConsumerProtocolSubscription of any version; ToolError if unreadable."""
    return list(_versioned(ConsumerProtocolSubscription, data).topics)


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    """``int16 version`` (3) + ConsumerProtocolAssignment: ``[topic, [int32 partition]]``."""
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        by_topic.setdefault(t, []).append(p)
    msg = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                             for t, ps in by_topic.items()], user_data=None)
    return _VERSION.pack(CONSUMER_PROTOCOL_VERSION) + bytes(msg.encode(
        CONSUMER_PROTOCOL_VERSION))


def decode_assignment(data) -> list[TopicPartition]:
    """(topic, partition) pairs of a ConsumerProtocolAssignment; empty bytes -> []."""
    if not data:
        return []
    msg = _versioned(ConsumerProtocolAssignment, data)
    return sorted((tp.topic, p) for tp in msg.assigned_partitions for p in tp.partitions)


def range_assign(subscriptions: dict[str, list[str]], partition_counts: dict[str, int],
                 instance_ids: dict[str, str | None] | None = None
                 ) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: member id -> its partitions (see the module docstring).
    Topics missing from ``partition_counts`` are not assigned."""
    instance_ids = instance_ids or {}

    def order(member: str) -> tuple:
        iid = instance_ids.get(member)
        return (0, iid, member) if iid is not None else (1, "", member)

    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        n = partition_counts.get(topic)
        if not n:
            continue
        members = sorted((m for m, ts in subscriptions.items() if topic in ts), key=order)
        per, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            length = per + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + length))
            start += length
    return out


# --- the member ---------------------------------------------------------------------------
class GroupMember:
    """One member of ``group_id`` subscribed to ``topics`` (see the module docstring).

    ``join()`` -> this generation's partitions; ``rejoin_needed`` turns true when the
    heartbeat thread learns of a rebalance; ``commit(offsets)``, ``committed(tps)``,
    ``close()`` (stops heartbeats, leaves the group). Timeouts in ms as Kafka's configs.
    """

    def __init__(self, bootstrap: str, group_id: str, topics: Iterable[str], *,
                 session_timeout_ms: int = 45000, rebalance_timeout_ms: int = 300000,
                 heartbeat_interval_ms: int = 3000, group_instance_id: str | None = None,
                 client_id: str = "console-consumer", request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, warn: Callable[[str], None] | None = None,
                 security=None) -> None:
        if session_timeout_ms <= 0 or rebalance_timeout_ms <= 0 or heartbeat_interval_ms <= 0:
            raise ToolError("session.timeout.ms, max.poll.interval.ms and "
                            "heartbeat.interval.ms must be positive")
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = min(heartbeat_interval_ms, max(session_timeout_ms // 3, 1))
        self.group_instance_id = group_instance_id
        self.request_timeout = request_timeout_ms / 1000.0
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.warn = warn or (lambda msg: None)
        self.client = KafkaClient(bootstrap, client_id=client_id, timeout=self.request_timeout,
                                  security=security)
        self.member_id = ""
        self.generation_id = -1
        self.assignment: list[TopicPartition] = []
        self.coordinator: int | None = None
        self._lock = threading.Lock()
        self._in_flight = False
        self._rejoin = threading.Event()
        self._active = threading.Event()
        self._stop = threading.Event()
        self._fatal: ToolError | None = None
        self._thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                        name=f"heartbeat-{group_id}")
        self._thread.start()

    # --- state seen by the caller ---------------------------------------------------------
    @property
    def rejoin_needed(self) -> bool:
        """True once a heartbeat learned that this member must join again. Raises the
        heartbeat thread's fatal error (FENCED_INSTANCE_ID) if it had one."""
        if self._fatal is not None:
            raise self._fatal
        return self._rejoin.is_set()

    # --- requests on the coordinator connection -------------------------------------------
    def _request(self, api_key: int, body, version: int, timeout: float | None = None):
        if self.coordinator is None:
            self._find_coordinator()
        self._in_flight = True
        try:
            resp = self.client.request(api_key, body, version=version, node=self.coordinator,
                                       timeout=timeout)
        except ToolError:
            self._coordinator_dead()
            raise
        self._in_flight = False
        return resp

    def _coordinator_dead(self) -> None:
        if self.coordinator is not None:
            self.client.reset_connection(self.coordinator)
        self.coordinator = None
        self._in_flight = False

    def _find_coordinator(self) -> None:
        version = self.client.version_for(FIND_COORDINATOR, max_version=3)
        body = {"key": self.group_id}
        if version >= 1:
            body["key_type"] = 0
        deadline = time.monotonic() + self.request_timeout
        while True:
            resp = self.client.request(FIND_COORDINATOR, body, version=version)
            if resp.error_code == 0:
                self.client.metadata([])
                self.coordinator = resp.node_id
                return
            if resp.error_code not in _COORDINATOR_ERRORS or time.monotonic() > deadline:
                raise ToolError(f"cannot find the coordinator of group {self.group_id}: "
                                f"{error_name(resp.error_code)}")
            time.sleep(self.retry_backoff)

    # --- join / sync ----------------------------------------------------------------------
    def join(self) -> list[TopicPartition]:
        """JoinGroup + SyncGroup until this member holds an assignment of a Stable
        generation; returns it (sorted). ToolError on a fatal error (INCONSISTENT_GROUP_
        PROTOCOL 23, INVALID_SESSION_TIMEOUT 26, GROUP_MAX_SIZE_REACHED 81,
        FENCED_INSTANCE_ID 82, GROUP_AUTHORIZATION_FAILED 30, ...) or when the coordinator
        stays unavailable for the request timeout."""
        self._active.clear()
        self.assignment = []
        deadline = time.monotonic() + self.rebalance_timeout_ms / 1000.0 + self.request_timeout
        with self._lock:
            while True:
                if time.monotonic() > deadline:
                    raise ToolError(f"could not join group {self.group_id} in time")
                self._rejoin.clear()
                try:
                    assignment = self._join_once()
                except _Retry:
                    time.sleep(self.retry_backoff)
                    continue
                if assignment is None:
                    continue
                self.assignment = assignment
                self._active.set()
                return assignment

    def _join_once(self) -> list[TopicPartition] | None:
        """One JoinGroup (+ SyncGroup); None: join again at once; _Retry: after a backoff."""
        version = self.client.version_for(JOIN_GROUP, max_version=9)
        if self.group_instance_id is not None and version < 5:
            raise ToolError("group.instance.id needs JoinGroup v5+ (KIP-345)")
        body = {"group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": PROTOCOL_NAME,
                               "metadata": encode_subscription(self.topics,
                                                               self.generation_id)}],
                "reason": "joining the group" if not self.member_id else "rejoining"}
        timeout = max(self.request_timeout, self.rebalance_timeout_ms / 1000.0 + 5.0)
        try:
            resp = self._request(JOIN_GROUP, body, version, timeout=timeout)
        except ToolError as e:
            self.warn(f"JoinGroup failed ({e}); retrying")
            raise _Retry() from None
        err = resp.error_code
        if err == E.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            return None
        if err == E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return None
        if err in _COORDINATOR_ERRORS:
            self._coordinator_dead()
            raise _Retry()
        if err == E.REBALANCE_IN_PROGRESS:
            raise _Retry()
        if err:
            raise ToolError(f"cannot join group {self.group_id}: {error_name(err)}")
        if resp.protocol_name not in (None, PROTOCOL_NAME):
            raise ToolError(f"group {self.group_id} chose assignor {resp.protocol_name!r}; "
                            f"this consumer only knows {PROTOCOL_NAME!r}")
        self.member_id = resp.member_id
        self.generation_id = resp.generation_id
        assignments = []
        if resp.leader == self.member_id and not getattr(resp, "skip_assignment", False):
            assignments = self._leader_assignments(resp.members)
        return self._sync(assignments)

    def _leader_assignments(self, members) -> list[dict]:
        subs: dict[str, list[str]] = {}
        instance_ids: dict[str, str | None] = {}
        for m in members:
            try:
                subs[m.member_id] = decode_subscription(m.metadata)
            except ToolError as e:
                self.warn(f"member {m.member_id}: {e}; it gets no partitions")
                subs[m.member_id] = []
            instance_ids[m.member_id] = getattr(m, "group_instance_id", None)
        topics = sorted({t for ts in subs.values() for t in ts})
        counts = {}
        if topics:
            md = self.client.metadata(topics)
            counts = {t.name: len(t.partitions) for t in md.topics if t.error_code == 0}
        plan = range_assign(subs, counts, instance_ids)
        return [{"member_id": m, "assignment": encode_assignment(tps)}
                for m, tps in plan.items()]

    def _sync(self, assignments: list[dict]) -> list[TopicPartition] | None:
        version = self.client.version_for(SYNC_GROUP, max_version=5)
        body = {"group_id": self.group_id, "generation_id": self.generation_id,
                "member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "protocol_type": PROTOCOL_TYPE, "protocol_name": PROTOCOL_NAME,
                "assignments": assignments}
        timeout = max(self.request_timeout, self.rebalance_timeout_ms / 1000.0 + 5.0)
        try:
            resp = self._request(SYNC_GROUP, body, version, timeout=timeout)
        except ToolError as e:
            self.warn(f"SyncGroup failed ({e}); rejoining")
            raise _Retry() from None
        err = resp.error_code
        if err == E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return None
        if err in _REJOIN_ERRORS:
            return None
        if err in _COORDINATOR_ERRORS:
            self._coordinator_dead()
            raise _Retry()
        if err:
            raise ToolError(f"SyncGroup for group {self.group_id} failed: {error_name(err)}")
        try:
            return decode_assignment(resp.assignment)
        except ToolError as e:
            raise ToolError(f"group {self.group_id}: unreadable assignment: {e}") from None

    # --- heartbeats -----------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_interval_ms / 1000.0
        while not self._stop.wait(interval):
            if not self._active.is_set() or self._rejoin.is_set():
                continue
            with self._lock:
                if self._stop.is_set() or not self._active.is_set():
                    continue
                try:
                    self._heartbeat_once()
                except ToolError as e:
                    self.warn(f"heartbeat failed ({e})")
                    self._rejoin.set()
                except Exception as e:  # noqa: BLE001 - the thread must not die silently
                    self._fatal = ToolError(f"heartbeat thread: {e!r}")
                    self._rejoin.set()

    def _heartbeat_once(self) -> None:
        version = self.client.version_for(HEARTBEAT, max_version=4)
        resp = self._request(HEARTBEAT, {
            "group_id": self.group_id, "generation_id": self.generation_id,
            "member_id": self.member_id, "group_instance_id": self.group_instance_id},
            version)
        err = resp.error_code
        if err == 0:
            return
        if err == E.FENCED_INSTANCE_ID:
            self._fatal = ToolError(f"group {self.group_id}: another consumer uses "
                                    f"group.instance.id {self.group_instance_id} "
                                    f"(FENCED_INSTANCE_ID)")
        elif err == E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        elif err in _COORDINATOR_ERRORS:
            self._coordinator_dead()
        elif err not in _REJOIN_ERRORS:
            self.warn(f"heartbeat: {error_name(err)}")
        self._active.clear()
        self._rejoin.set()

    # --- offsets --------------------------------------------------------------------------
    def commit(self, offsets: dict[TopicPartition, int]) -> bool:
        """OffsetCommit ``offsets`` (next offset to read per partition) with this member's
        generation. False (and a warning) when the group rebalanced meanwhile (ILLEGAL_
        GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS: Kafka's CommitFailedException)
        or the coordinator moved; ToolError for other errors."""
        if not offsets:
            return True
        version = self.client.version_for(OFFSET_COMMIT, max_version=8)
        if version < 2:
            raise ToolError("the broker's OffsetCommit is too old (needs v2+)")
        topics: dict[str, list] = {}
        for (t, p), off in sorted(offsets.items()):
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                             "committed_metadata": ""})
        with self._lock:
            body = {"group_id": self.group_id,
                    "generation_id_or_member_epoch": self.generation_id,
                    "member_id": self.member_id,
                    "group_instance_id": self.group_instance_id if version >= 7 else None,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            if version <= 4:
                body["retention_time_ms"] = -1
            try:
                resp = self._request(OFFSET_COMMIT, body, version)
            except ToolError as e:
                self.warn(f"offset commit failed ({e})")
                self._rejoin.set()
                return False
        errors = {p.error_code for t in resp.topics for p in t.partitions if p.error_code}
        if not errors:
            return True
        err = min(errors)
        if err in _REJOIN_ERRORS or err in _COORDINATOR_ERRORS:
            self.warn(f"offset commit for group {self.group_id} failed: {error_name(err)} "
                      f"(the group rebalanced; records may be read again)")
            if err in _COORDINATOR_ERRORS:
                self._coordinator_dead()
            self._rejoin.set()
            return False
        raise ToolError(f"offset commit for group {self.group_id} failed: "
                        f"{error_name(err)}")

    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """OffsetFetch (v2-v7): the committed offset of each of ``tps`` that has one."""
        tps = sorted(tps)
        if not tps:
            return {}
        version = self.client.version_for(OFFSET_FETCH, max_version=7)
        if version < 2:
            raise ToolError("the broker's OffsetFetch is too old (needs v2+)")
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        body = {"group_id": self.group_id,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
        deadline = time.monotonic() + self.request_timeout
        while True:
            with self._lock:
                resp = self._request(OFFSET_FETCH, body, version)
            err = resp.error_code or next((p.error_code for t in resp.topics
                                           for p in t.partitions if p.error_code), 0)
            if err in _COORDINATOR_ERRORS and time.monotonic() < deadline:
                self._coordinator_dead()
                time.sleep(self.retry_backoff)
                continue
            if err:
                raise ToolError(f"cannot fetch offsets of group {self.group_id}: "
                                f"{error_name(err)}")
            return {(t.name, p.partition_index): p.committed_offset
                    for t in resp.topics for p in t.partitions if p.committed_offset >= 0}

    # --- shutdown -------------------------------------------------------------------------
    def close(self, leave: bool = True) -> None:
        """Stop the heartbeat thread, send LeaveGroup (dynamic members only, see the module
        docstring) and close the connections. Errors here are warnings, not failures."""
        self._stop.set()
        self._active.clear()
        self._thread.join(timeout=self.request_timeout + 1)
        try:
            if self._in_flight:
                self._coordinator_dead()
            if leave and self.member_id and self.group_instance_id is None:
                self._leave()
        except ToolError as e:
            self.warn(f"LeaveGroup failed ({e})")
        finally:
            self.client.close()

    def _leave(self) -> None:
        version = self.client.version_for(LEAVE_GROUP, max_version=5)
        body: dict = {"group_id": self.group_id}
        if version >= 3:
            body["members"] = [{"member_id": self.member_id, "group_instance_id": None,
                                "reason": "the consumer is being closed"}]
        else:
            body["member_id"] = self.member_id
        with self._lock:
            resp = self._request(LEAVE_GROUP, body, version)
        err = resp.error_code or next((m.error_code for m in (resp.members or [])
                                       if m.error_code), 0)
        if err and err not in (E.UNKNOWN_MEMBER_ID, *_COORDINATOR_ERRORS):
            self.warn(f"LeaveGroup for group {self.group_id}: {error_name(err)}")
        self.member_id = ""
        self.generation_id = -1


class _Retry(Exception):
    """Internal: join again after ``retry.backoff.ms``."""
