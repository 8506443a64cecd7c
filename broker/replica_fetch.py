"""Fetch reads of the partitions a broker hosts (Kafka's ReplicaManager.fetchMessages and
readFromLocalLog): consumers and followers read the local logs; a fetch short of `min_bytes`
parks as a DelayedFetch in the Fetch purgatory (completed by appends, HW moves, leader
changes, deletion or `max_wait_ms`).

Functions over the broker's `broker.replica_manager.ReplicaManager` (`rm`), which binds them
as its methods (`fetch_messages`, `read_from_local_log`, and `_read_for_delayed_fetch`, the
re-read every parked DelayedFetch calls); no call layer is added on the fetch path.
Per-partition errors are in the `FetchPartitionData` results (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, OFFSET_OUT_OF_RANGE, KAFKA_STORAGE_ERROR,
...), never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.partition import READ_COMMITTED, Partition
from broker.purgatory.delayed_fetch import (
    DelayedFetch,
    FetchParams,
    FetchPartitionData,
    FetchPartitionStatus,
    PartitionFetchInfo,
)
from broker.purgatory.delayed_operation import FetchSessionKey, TopicPartitionKey
from broker.replication.replica_selector import preferred_read_replica
from broker.request_channel import Deferred
from protocol.errors import ErrorCode, KafkaError

__all__ = ["fetch_messages", "read_for_delayed_fetch", "read_from_local_log"]

log = logging.getLogger("broker.replica_manager")

TopicPartition = tuple[str, int]


def read_from_local_log(rm, params: FetchParams,
                        fetch_infos: list[tuple[TopicPartition, PartitionFetchInfo]]
                        ) -> dict[TopicPartition, FetchPartitionData]:
    """Read every partition once (Kafka's readFromLocalLog). `params.max_bytes` bounds the
    response; each partition reads at most min(its max_bytes, what is left); the first
    partition with data may exceed both by one batch (KIP-74) unless
    `hard_max_bytes_limit` (Fetch v0-v2). Follower fetches update the follower state
    (and may move the HW) first."""
    limit = params.max_bytes
    min_one = not params.hard_max_bytes_limit
    follower = params.replica_id >= 0
    out: dict[TopicPartition, FetchPartitionData] = {}
    hw_moved: list[TopicPartition] = []
    for tp, info in fetch_infos:
        diverging = None
        try:
            part = rm.partitions.get(tp)
            if part is None:
                part = rm.get_partition_or_error(*tp)
            if follower:
                read, moved = part.fetch_records_for_follower(
                    params.replica_id, info.fetch_offset, min(info.max_bytes, limit),
                    current_leader_epoch=info.current_leader_epoch,
                    last_fetched_epoch=info.last_fetched_epoch,
                    follower_log_start_offset=info.log_start_offset,
                    broker_epoch=params.replica_epoch, min_one_message=min_one)
                if moved:
                    hw_moved.append(tp)
                diverging = read.diverging_epoch
                if _leader_throttled(rm, part, params.replica_id):
                    read.records = b""
                elif read.records and rm.leader_quota.is_throttled(*tp):
                    rm.leader_quota.record(len(read.records))
            else:
                if params.rack_id and rm.replica_selector is not None and \
                        part.is_leader and part.followers:
                    preferred = preferred_read_replica(rm, part, info.fetch_offset,
                                                       params.rack_id)
                    if preferred is not None:
                        out[tp] = FetchPartitionData(
                            ErrorCode.NONE, part.high_watermark, part.last_stable_offset,
                            part.log_start_offset, b"", preferred_read_replica=preferred)
                        continue
                read = part.read_records(
                    info.fetch_offset, min(info.max_bytes, limit),
                    current_leader_epoch=info.current_leader_epoch,
                    fetch_only_from_leader=params.fetch_only_from_leader,
                    is_follower=False, isolation_level=params.isolation_level,
                    min_one_message=min_one)
        except KafkaError as e:
            out[tp] = FetchPartitionData(e.code, error_message=e.message)
            continue
        except OSError as e:
            e = rm.storage_error(tp, "read", e)
            out[tp] = FetchPartitionData(e.code, error_message=e.message)
            continue
        except Exception as e:  # noqa: BLE001
            log.exception("read of %s-%d failed", tp[0], tp[1])
            out[tp] = FetchPartitionData(ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(e))
            continue
        size = len(read.records)
        if size:
            min_one = False
            limit = max(0, limit - size)
        if follower:
            end, end_bytes = read.log_end_offset, part.end_bytes
        else:
            end = read.last_stable_offset if params.isolation_level == READ_COMMITTED \
                else read.high_watermark
            end_bytes = part.hw_bytes
        out[tp] = FetchPartitionData(ErrorCode.NONE, read.high_watermark,
                                     read.last_stable_offset, read.log_start_offset,
                                     read.records, diverging_epoch=diverging,
                                     aborted_transactions=read.aborted_transactions,
                                     end_offset=end, end_bytes=end_bytes, partition=part)
    rm._wake_many(hw_moved)
    return out


def _leader_throttled(rm, part: Partition, replica_id: int) -> bool:
    """KIP-73 on the leader: a throttled partition's out-of-sync follower gets no data
    while the leader replication rate is above leader.replication.throttled.rate."""
    quota = rm.leader_quota
    return quota.is_throttled(part.topic, part.partition) and \
        replica_id not in part.isr and quota.is_quota_exceeded()


def read_for_delayed_fetch(rm, params: FetchParams,
                           fetch_infos: list[tuple[TopicPartition, PartitionFetchInfo]]
                            ) -> dict[TopicPartition, FetchPartitionData]:
    """A DelayedFetch's re-read: `read_from_local_log`, never raising (an unexpected
    failure answers UNKNOWN_SERVER_ERROR for every partition, logged)."""
    try:
        return rm.read_from_local_log(params, fetch_infos)
    except Exception as e:  # noqa: BLE001 - must not lose the client's answer
        log.exception("delayed fetch read failed")
        return {tp: FetchPartitionData(ErrorCode.UNKNOWN_SERVER_ERROR,
                                       error_message=str(e)) for tp, _ in fetch_infos}


def fetch_messages(rm, params: FetchParams,
                   fetch_infos: list[tuple[TopicPartition, PartitionFetchInfo]],
                   session=None, then: Callable[[dict], object] | None = None):
    """Kafka's fetchMessages: answer at once if `max_wait_ms` <= 0, nothing was asked,
    some partition failed, or at least `min_bytes` were found; else park a DelayedFetch
    (completed by appends / HW moves / leader changes / deletion / `max_wait_ms`) and
    return a Future of the same dict. `session`: the incremental fetch session whose
    changed partitions `fetch_infos` are; parked, the fetch watches the whole session
    (FetchSessionKey), so an empty `fetch_infos` waits too. `then(results)`: returned
    instead of the results (or set on the Future; its exception too), which spares the
    caller a Future of its own. The Future is a `broker.request_channel.Deferred`: the
    response leaves in the callback that completes the fetch (no loop turn later)."""
    results = rm.read_from_local_log(params, fetch_infos)
    if params.max_wait_ms <= 0 or rm._shutdown or (not fetch_infos and session is None):
        return results if then is None else then(results)
    total = 0
    for r in results.values():
        if r.error != ErrorCode.NONE or r.preferred_read_replica >= 0:
            return results if then is None else then(results)
        total += len(r.records)
    if total >= params.min_bytes:
        return results if then is None else then(results)
    follower = params.replica_id >= 0
    statuses = []
    for (tp, info) in fetch_infos:
        part = rm.partitions[tp]
        counter = part.end_bytes if follower else part.hw_bytes
        statuses.append(FetchPartitionStatus(tp[0], tp[1], info, part,
                                             counter - len(results[tp].records)))
    fut = Deferred()  # answered the moment the fetch completes, no loop turn later

    def done(res: dict) -> None:
        if fut.done():
            return
        if then is None:
            fut.set_result(res)
            return
        try:
            fut.set_result(then(res))
        except Exception as e:  # noqa: BLE001 - the caller's error, on its Future
            fut.set_exception(e)

    op = DelayedFetch(max(int(params.max_wait_ms), 0), params, statuses, list(fetch_infos),
                      rm.get_partition, rm._delayed_fetch_read, done, session)
    # just read and found short: park without trying again (nothing ran meanwhile)
    rm.delayed_fetch_purgatory.watch(
        op, (FetchSessionKey(session.id),) if session is not None else
        tuple({TopicPartitionKey(*tp): None for tp, _ in fetch_infos}))
    return fut
