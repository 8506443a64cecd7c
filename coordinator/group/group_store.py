"""GroupStore: where groups live in ``__consumer_offsets`` (Kafka's GroupMetadataManager I/O).

- ``partition_for(group_id)``: ``(java_string_hashcode(group_id) & 0x7fffffff) %
  offsets.topic.num.partitions`` -- Kafka's mapping, so a group lands on the same partition
  number as in Kafka.
- ``append(partition, records)``: one v2 RecordBatch (CreateTime = now ms), compressed with
  ``offsets.topic.compression.codec`` (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd; Kafka's
  default none), of ``(key, value)`` pairs (value None = tombstone) appended as leader with
  acks=-1 through the coordinator runtime (``coordinator.runtime``). Returns the error code mapped as Kafka maps a
  failed group/offset append for clients: UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT -> COORDINATOR_NOT_AVAILABLE; NOT_LEADER_OR_FOLLOWER,
  KAFKA_STORAGE_ERROR -> NOT_COORDINATOR; MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
  INVALID_FETCH_SIZE -> the caller's size error; anything else UNKNOWN_SERVER_ERROR.
- ``load(partition)``: reads the partition from its log start to its log end offset through
  the runtime (chunks of ``offsets.load.buffer.size`` bytes read off the event loop) and
  replays the records: the last value of each key wins,
  tombstones remove. Returns ``{group_id: GroupMetadata}`` with offsets attached (groups that
  only have offsets are Empty). Offsets in transactional batches (TxnOffsetCommit) wait for
  their producer's marker (``coordinator.group.txn_offsets.TxnOffsetReplay``); those of
  still-open transactions become ``GroupMetadata.pending_txn_offsets``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

from coordinator.append_errors import COORDINATOR_APPEND_ERRORS
from coordinator.group.consumer_records import ConsumerGroupReplay
from coordinator.group.group import GroupMetadata, GroupState
from coordinator.group.records import (
    GROUP_METADATA_TOPIC,
    GroupRecord,
    OffsetRecord,
    decode_record,
    group_from_value,
)
from coordinator.group.share_group_records import ShareGroupReplay
from coordinator.group.txn_offsets import TxnOffsetReplay
from coordinator.keys import java_string_hashcode
from coordinator.runtime import CoordinatorRuntime
from protocol.errors import ErrorCode, KafkaError
from protocol.record_builder import RecordBatchBuilder

__all__ = ["COMPRESSION_CODECS", "COORDINATOR_APPEND_ERRORS", "GROUP_METADATA_TOPIC",
           "GroupStore", "java_string_hashcode", "partition_for"]

log = logging.getLogger(__name__)

#: OffsetCommit/group writes wait at most this long for acks=-1 (offsets.commit.timeout.ms).
DEFAULT_COMMIT_TIMEOUT_MS = 5000
#: offsets.topic.compression.codec values (Kafka's CompressionType ids)
COMPRESSION_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
COMPRESSION_CODECS_ALLOWED = ", ".join(f"{k} ({v})" for k, v in COMPRESSION_CODECS.items())
SIZE_ERRORS = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                         ErrorCode.INVALID_FETCH_SIZE})


@functools.lru_cache(maxsize=65536)
def partition_for(group_id: str, num_partitions: int) -> int:
    return (java_string_hashcode(group_id) & 0x7FFFFFFF) % num_partitions


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupStore:
    """I/O of the coordinator against ``__consumer_offsets`` (see the module docstring)."""

    def __init__(self, runtime: CoordinatorRuntime, num_partitions: int = 50,
                 commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS,
                 time_ms: Callable[[], int] = _now_ms, compression_type: int = 0) -> None:
        if compression_type not in COMPRESSION_CODECS:
            raise ValueError(f"unknown compression codec {compression_type} "
                             f"(allowed: {COMPRESSION_CODECS_ALLOWED})")
        self.compression_type = compression_type
        self.runtime = runtime
        self.num_partitions = num_partitions
        self.commit_timeout_ms = commit_timeout_ms
        self.time_ms = time_ms
        self.appends = 0

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def build_batch(self, records: list[tuple[bytes, bytes | None]]) -> bytearray:
        builder = RecordBatchBuilder(compression_type=self.compression_type)
        now = self.time_ms()
        for key, value in records:
            builder.append(now, key, value)
        return bytearray(builder.build())

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]
                     ) -> ErrorCode:
        """Append ``records`` to ``__consumer_offsets-<partition>``; the mapped error code."""
        if not records:
            return ErrorCode.NONE
        try:
            batch = self.build_batch(records)
        except KafkaError as e:
            return self.map_error(e.code)
        r = await self.runtime.append_batch(GROUP_METADATA_TOPIC, partition, batch,
                                            self.commit_timeout_ms)
        self.appends += 1
        if r.error != ErrorCode.NONE:
            log.warning("append to %s-%d failed: %s %s", GROUP_METADATA_TOPIC, partition,
                        ErrorCode(r.error).name, r.error_message or "")
        return self.map_error(r.error)

    @staticmethod
    def map_error(code) -> ErrorCode:
        code = ErrorCode(code)
        if code == ErrorCode.NONE or code in SIZE_ERRORS:
            return code
        if code in COORDINATOR_APPEND_ERRORS:
            return COORDINATOR_APPEND_ERRORS[code]
        return ErrorCode.UNKNOWN_SERVER_ERROR

    async def load(self, partition: int, is_current: Callable[[], bool] = lambda: True
                   ) -> dict[str, GroupMetadata]:
        """Replay ``__consumer_offsets-<partition>`` (see the module docstring). Stops early
        (returning what it has) once ``is_current()`` turns False (the partition emigrated)."""
        offsets: dict[str, dict[tuple[str, int], object]] = {}
        groups: dict[str, object] = {}
        txn = TxnOffsetReplay(offsets)  # transactional offset commits (KIP-98)
        consumer_replay = ConsumerGroupReplay()  # KIP-848 records (key versions 3-8)
        share_replay = ShareGroupReplay()  # KIP-932 records (key versions 10-15)
        try:
            async for batches in self.runtime.read_batches(GROUP_METADATA_TOPIC, partition,
                                                           is_current):
                for batch in batches:
                    if batch.marker is not None:
                        txn.on_marker(batch.producer_id, batch.marker)
                        continue
                    for rec in batch.records:
                        self._replay(partition, batch, rec, offsets, groups, txn,
                                     consumer_replay, share_replay)
        except KafkaError as e:
            if e.code != ErrorCode.CORRUPT_MESSAGE:
                raise
            log.warning("%s; stopping the load", e.message)
        return self._loaded(groups, offsets, txn, consumer_replay, share_replay)

    @staticmethod
    def _replay(partition: int, batch, rec, offsets: dict, groups: dict,
                txn: TxnOffsetReplay, consumer_replay: ConsumerGroupReplay,
                share_replay: ShareGroupReplay) -> None:
        try:
            parsed = decode_record(rec.key, rec.value)
        except KafkaError as e:
            log.warning("skipping unreadable record at %s-%d offset %d: %s",
                        GROUP_METADATA_TOPIC, partition, rec.offset, e)
            return
        if isinstance(parsed, OffsetRecord) and batch.is_transactional:
            txn.add(batch.producer_id, parsed.group_id, (parsed.topic, parsed.partition),
                    parsed.value, rec.offset)
        elif isinstance(parsed, OffsetRecord):
            tp = (parsed.topic, parsed.partition)
            txn.note_plain(parsed.group_id, tp, rec.offset)
            group_offsets = offsets.setdefault(parsed.group_id, {})
            if parsed.value is None:
                group_offsets.pop(tp, None)
            else:
                group_offsets[tp] = parsed.value
        elif parsed is None and rec.key is not None:
            try:
                consumer_replay.add(rec.key, rec.value) or share_replay.add(rec.key, rec.value)
            except KafkaError as e:
                log.warning("skipping unreadable record at %s-%d offset %d: %s",
                            GROUP_METADATA_TOPIC, partition, rec.offset, e)
        elif isinstance(parsed, GroupRecord):
            if parsed.value is None:
                groups.pop(parsed.group_id, None)
            else:
                groups[parsed.group_id] = parsed.value

    def _loaded(self, groups: dict, offsets: dict, txn: TxnOffsetReplay,
                consumer_replay: ConsumerGroupReplay, share_replay: ShareGroupReplay
                ) -> dict[str, GroupMetadata]:
        out: dict[str, GroupMetadata] = {}
        for group_id, value in groups.items():
            out[group_id] = group_from_value(group_id, value, self.time_ms)
        out.update(consumer_replay.groups(self.time_ms))
        out.update(share_replay.groups())
        for group_id, group_offsets in offsets.items():
            if not group_offsets:
                continue
            group = out.get(group_id)
            if group is None:
                group = GroupMetadata(group_id, GroupState.EMPTY, self.time_ms)
                out[group_id] = group
            group.offsets.update(group_offsets)
        for group_id, by_producer in txn.open_offsets().items():
            group = out.get(group_id)
            if group is None:
                group = out[group_id] = GroupMetadata(group_id, GroupState.EMPTY, self.time_ms)
            group.pending_txn_offsets.update(by_producer)
        return out
