"""`DelayedFetch`: a fetch short of `fetch.min.bytes` waiting up to `max.wait.ms` (Kafka's
DelayedFetch), plus the value types of the fetch path.

The ReplicaManager reads every partition once; when the bytes found are fewer than
`min_bytes` (and nothing failed), it parks a DelayedFetch watching each partition's
`TopicPartitionKey`. It is checked again (`check_and_complete`) after every append that
moves the partition's high watermark (consumers) or log end offset (followers), after a
leader change and after a deletion; the timer completes it at `max_wait_ms`. On completion
the partitions are read again and the callback answers the client.

Bytes are counted with the Partition's monotonic byte counters (`hw_bytes` for consumers,
`end_bytes` for followers, see broker.partition) rather than by re-reading the log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.purgatory.delayed_operation import DelayedOperation
from protocol.errors import ErrorCode

__all__ = ["DelayedFetch", "FetchParams", "FetchPartitionData", "FetchPartitionStatus",
           "PartitionFetchInfo"]

INT32_MAX = 0x7FFFFFFF


@dataclass(slots=True)
class FetchParams:
    """Request-level fetch parameters. `replica_id` >= 0 is a follower broker, -1 a
    consumer; `max_wait_ms` and `min_bytes`/`max_bytes` as in the request (bytes);
    `hard_max_bytes_limit` is True for Fetch v0-v2 (no KIP-74 "first message may exceed")."""

    replica_id: int = -1
    max_wait_ms: int = 0
    min_bytes: int = 1
    max_bytes: int = INT32_MAX
    isolation_level: int = 0
    hard_max_bytes_limit: bool = False
    fetch_only_from_leader: bool = True
    replica_epoch: int = -1  # a follower's broker epoch (Fetch v15+ ReplicaState)
    rack_id: str = ""  # the consumer's client.rack (Fetch v11+, KIP-392)

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(slots=True)
class PartitionFetchInfo:
    """One partition of a fetch: offset, per-partition byte limit, the client's view of
    the leader epoch (-1 = unknown) and, for followers, their log start offset."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class FetchPartitionData:
    """One partition's fetch answer. `records` is a `storage.segment.FileRecords` (file
    slices, sent with sendfile) or empty bytes; offsets are -1 on error (Kafka's
    LogReadResult for a failed read). `diverging_epoch`: a follower must truncate first
    (Fetch v12+ DivergingEpoch); `preferred_read_replica` >= 0: read from that broker
    instead (KIP-392, no records)."""

    error: int = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: object = b""
    preferred_read_replica: int = -1
    error_message: str | None = None
    aborted_transactions: list | None = None  # [(producer_id, first_offset)], read_committed
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) for a follower
    # what the read could see: up to `end_offset` (the LEO for a follower, the HW or LSO for
    # a consumer; -1 unknown), where the partition's byte counter (`end_bytes` for a
    # follower read, `hw_bytes` for a consumer read) stood at `end_bytes`; `partition` is the
    # Partition read (fetch sessions skip partitions read caught up until they change)
    end_offset: int = -1
    end_bytes: int = -1
    partition: object = None


class FetchPartitionStatus:
    """A partition of a parked fetch: the Partition object it read from and the value of
    its byte counter (minus what was already found) when it parked."""

    __slots__ = ("topic", "partition", "info", "hosted", "start_bytes")

    def __init__(self, topic: str, partition: int, info: PartitionFetchInfo, hosted,
                 start_bytes: int) -> None:
        self.topic = topic
        self.partition = partition
        self.info = info
        self.hosted = hosted
        self.start_bytes = start_bytes


class DelayedFetch(DelayedOperation):
    """`read(params, fetch_infos) -> dict` re-reads the partitions on completion;
    `get_partition(topic, p)` gives the hosted Partition or None; `callback(results)` is
    called exactly once with (topic, partition) -> FetchPartitionData."""

    __slots__ = ("params", "statuses", "fetch_infos", "get_partition", "read", "callback",
                 "expired", "session", "_listed")

    def __init__(self, delay_ms: int, params: FetchParams, statuses: list[FetchPartitionStatus],
                 fetch_infos: list, get_partition: Callable, read: Callable,
                 callback: Callable[[dict], None], session=None) -> None:
        super().__init__(delay_ms)
        self.params = params
        self.statuses = statuses
        self.fetch_infos = fetch_infos
        self.get_partition = get_partition
        self.read = read
        self.callback = callback
        self.expired = False
        # an incremental fetch session (broker.fetch_session): the operation is its `waiter`,
        # watches FetchSessionKey(session id) and takes in partitions of the session that
        # change while it waits (`add_partition`)
        self.session = session
        self._listed: set | None = None  # (topic, partition) of `statuses`, once one is added
        if session is not None:
            session.waiter = self

    def add_partition(self, tp, cached) -> None:
        """A session partition not read by this fetch changed: count its new bytes from
        where its last (caught-up) read left its byte counter, and read it on completion.
        `cached` is the session's CachedPartition (hosted Partition, byte counter, offsets)."""
        listed = self._listed
        if listed is None:  # a set: a leadership move wakes tens of thousands at once
            listed = self._listed = {(st.topic, st.partition) for st in self.statuses}
        if tp in listed:
            return
        listed.add(tp)
        info = cached.fetch_info()
        self.fetch_infos.append((tp, info))
        self.statuses.append(FetchPartitionStatus(
            tp[0], tp[1], info, cached.hosted,
            cached.end_bytes if cached.hosted is not None else -1))

    def try_complete(self) -> bool:
        """Complete as soon as one of these holds (Kafka's DelayedFetch cases):

        Case A: this broker is no longer the leader of a partition it fetches (consumer or
                follower fetches that require the leader) -> that partition answers
                NOT_LEADER_OR_FOLLOWER on the re-read.
        Case B: a partition is no longer hosted here (deleted, or replaced by a new
                Partition after delete + re-create) -> UNKNOWN_TOPIC_OR_PARTITION.
        Case C: the fetch offset is no longer on the log as it was: the log was truncated or
                rebuilt (byte counter went backwards) or the fetch offset is past the log end
                -> the re-read answers (OFFSET_OUT_OF_RANGE if it is out of range).
        Case D: the leader epoch changed since the fetch parked (a new leadership term) ->
                the re-read answers FENCED_LEADER_EPOCH / data as appropriate.
        Case E: the bytes that became readable since parking (up to the high watermark for
                consumers, the log end offset for followers) reach `min_bytes` -> NONE with
                the data. A READ_COMMITTED fetch counts a partition only once its last
                stable offset passed the fetch offset (Kafka's TXN_COMMITTED end offset).
        (Case F, the deadline `max_wait_ms`, is the timer: whatever is readable is returned.)
        """
        accumulated = 0
        follower = self.params.replica_id >= 0
        read_committed = not follower and self.params.isolation_level == 1
        only_leader = self.params.fetch_only_from_leader
        for st in self.statuses:
            current = self.get_partition(st.topic, st.partition)
            if current is None or current is not st.hosted or current.deleted:
                return self.force_complete()  # case B (or a session partition never read)
            if only_leader and not current.is_leader:
                return self.force_complete()  # case A
            epoch = st.info.current_leader_epoch
            if epoch >= 0 and epoch != current.leader_epoch:
                return self.force_complete()  # case D
            if st.info.fetch_offset > current.log.log_end_offset:
                return self.force_complete()  # case C
            counter = current.end_bytes if follower else current.hw_bytes
            if counter < st.start_bytes:
                return self.force_complete()  # case C
            if read_committed and current.last_stable_offset <= st.info.fetch_offset:
                continue  # nothing readable yet: an open transaction holds the LSO back
            accumulated += counter - st.start_bytes
        if accumulated >= self.params.min_bytes:
            return self.force_complete()  # case E
        return False

    def on_expiration(self) -> None:
        self.expired = True

    def on_complete(self) -> None:
        session = self.session
        if session is not None and session.waiter is self:
            session.waiter = None
        self.callback(self.read(self.params, self.fetch_infos))
