"""The share coordinator: `__share_group_state` served through the coordinator runtime
(Kafka's ShareCoordinatorService + its CoordinatorRuntime, KIP-932 "Share group state").

Placement: a share-partition's state lives in `__share_group_state` partition
`abs(javaHashCode("group:topicId:partition")) % share.coordinator.state.topic.num.partitions`
(`partition_for`; FindCoordinator key type 2 answers its leader). This broker serves the
partitions it leads: `on_election(p, leader_epoch)` loads one (replays every record through a
`ShareCoordinatorShard`; malformed records are logged and skipped; a failed load is retried
after `LOAD_RETRY_BACKOFF_MS` while still leader), `on_resignation(p)` drops it.

Operations (`write_state`, `read_state`, `read_state_summary`, `initialize_state`,
`delete_state`, one share-partition each): a partition not led here answers NOT_COORDINATOR,
one still loading COORDINATOR_LOAD_IN_PROGRESS, a stopped coordinator
COORDINATOR_NOT_AVAILABLE; otherwise the shard's pure function decides (errors listed in
`coordinator_shard`). Its records are appended with acks=all
(`share.coordinator.write.timeout.ms`) before the answer; an append error maps to
NOT_COORDINATOR (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR), COORDINATOR_NOT_AVAILABLE
(NOT_ENOUGH_REPLICAS*, REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION) or
UNKNOWN_SERVER_ERROR, and the shard is rolled back.

Group commit: operations on one state partition queue up; one worker per partition takes
everything queued (up to `MAX_BATCH_OPERATIONS`), applies the operations to the shard in
order (each sees the ones before it), appends all their records as one batch, and answers
them all, or rolls all back and fails them all with the append's error. While an append
waits for the ISR, the next batch gathers, so acks=all latency is paid once per batch,
not once per acknowledgement.

Pruning: every `share.coordinator.state.topic.prune.interval.ms` the log start offset of each
loaded partition is advanced to `shard.prunable_offset()` (every live key has a snapshot at
or after it), as Kafka's share coordinator does with DeleteRecords.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.append_errors import COORDINATOR_APPEND_ERRORS
from coordinator.keys import java_abs, java_string_hashcode, share_coordinator_key
from coordinator.runtime import CoordinatorRuntime
from coordinator.share.coordinator_shard import (
    DEFAULT_SNAPSHOT_UPDATE_RECORDS,
    ShareCoordinatorShard,
)
from coordinator.share.persister import (
    DeleteStateRequest,
    InitializeStateRequest,
    ReadStateRequest,
    ReadStateResult,
    ReadStateSummaryRequest,
    ReadStateSummaryResult,
    WriteStateRequest,
)
from coordinator.share.records import BinaryRecordCodec, RecordCodec, ShareRecord, ShareStateKey
from protocol.errors import ErrorCode, ProtocolError

__all__ = ["SHARE_GROUP_STATE_TOPIC", "ShareCoordinator", "ShareCoordinatorConfig"]

log = logging.getLogger(__name__)

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
LOAD_RETRY_BACKOFF_MS = 1000
MAX_BATCH_OPERATIONS = 256
E = ErrorCode



@dataclass
class ShareCoordinatorConfig:
    """Kafka's `share.coordinator.*` keys that the runtime uses."""

    num_partitions: int = 50
    snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS
    write_timeout_ms: int = 5000
    prune_interval_ms: int = 300_000

    @classmethod
    def from_kafka_config(cls, get: Callable[[str], object]) -> ShareCoordinatorConfig:
        return cls(int(get("share.coordinator.state.topic.num.partitions")),
                   int(get("share.coordinator.snapshot.update.records.per.snapshot")),
                   int(get("share.coordinator.write.timeout.ms")),
                   int(get("share.coordinator.state.topic.prune.interval.ms")))


def _code(code: int) -> int:
    return code


class _Operation:
    __slots__ = ("key", "compute", "fail", "future")

    def __init__(self, key: ShareStateKey, compute, fail, future: asyncio.Future) -> None:
        self.key = key
        self.compute = compute  # shard -> (records, answer)
        self.fail = fail  # error code -> answer
        self.future = future


class _StatePartition:
    """One `__share_group_state` partition this broker leads."""

    def __init__(self, index: int, epoch: int, shard: ShareCoordinatorShard) -> None:
        self.index = index
        self.epoch = epoch
        self.shard = shard
        self.loaded = False
        self.queue: list[_Operation] = []
        self.worker: asyncio.Task | None = None
        self.pruned_to = -1
        self.appends = 0


class ShareCoordinator:
    """See the module docstring. Implements `coordinator.runtime.CoordinatorPartitions`."""

    def __init__(self, runtime: CoordinatorRuntime, config: ShareCoordinatorConfig,
                 codec: RecordCodec | None = None) -> None:
        self.runtime = runtime
        self.config = config
        self.codec = codec or BinaryRecordCodec()
        self.topic = SHARE_GROUP_STATE_TOPIC
        self.partitions: dict[int, _StatePartition] = {}
        self.active = False
        self._tasks: set[asyncio.Task] = set()
        self._prune_handle = None
        self.write_latency_ms: list[float] = []  # recent appends (metrics), bounded

    # ------------------------------------------------------------------ lifecycle
    def startup(self) -> None:
        self.active = True
        self.runtime.watch_leadership(self.topic, self)
        self._schedule_prune()

    async def shutdown(self) -> None:
        self.active = False
        if self._prune_handle is not None:
            self._prune_handle.cancel()
        for p in list(self.partitions):
            self.on_resignation(p)
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                pass

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ placement
    def partition_for_key(self, key: str) -> int:
        return java_abs(java_string_hashcode(key)) % self.config.num_partitions

    def partition_for(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_for_key(share_coordinator_key(group_id, topic_id, partition))

    # ------------------------------------------------------------------ leadership
    def owned_partitions(self) -> set[int]:
        return set(self.partitions)

    def on_election(self, partition: int, leader_epoch: int = 0) -> asyncio.Task | None:
        cur = self.partitions.get(partition)
        if cur is not None and cur.epoch == leader_epoch:
            return None
        if cur is not None:
            self.on_resignation(partition)
        shard = ShareCoordinatorShard(
            snapshot_update_records_per_snapshot=self.config.snapshot_update_records_per_snapshot,
            time_ms=self.runtime.wall_clock_ms, partition_exists=self._partition_exists)
        sp = self.partitions[partition] = _StatePartition(partition, leader_epoch, shard)
        return self._spawn(self._load(sp))

    def on_resignation(self, partition: int) -> None:
        sp = self.partitions.pop(partition, None)
        if sp is None:
            return
        for op in sp.queue:
            if not op.future.done():
                op.future.set_result(op.fail(E.NOT_COORDINATOR))
        sp.queue.clear()
        log.info("share coordinator: resigned %s-%d", self.topic, partition)

    def _partition_exists(self, topic_id: uuid.UUID, partition: int) -> bool:
        n = self.runtime.topic_partitions(topic_id)
        return n is not None and 0 <= partition < n

    async def _load(self, sp: _StatePartition) -> None:
        def current() -> bool:
            return self.active and self.partitions.get(sp.index) is sp

        while current():
            n = skipped = 0
            try:
                async for chunk in self.runtime.read(self.topic, sp.index, current):
                    for rec in chunk:
                        try:
                            record = self.codec.decode(rec.key, rec.value)
                        except ProtocolError as e:
                            skipped += 1
                            log.warning("skipping unreadable record at %s-%d offset %d: %s",
                                        self.topic, sp.index, rec.offset, e)
                            continue
                        sp.shard.replay(rec.offset, record)
                        n += 1
            except Exception:  # noqa: BLE001 - storage errors: retry while still leader
                log.exception("loading %s-%d failed; retrying in %d ms", self.topic, sp.index,
                              LOAD_RETRY_BACKOFF_MS)
                sp.shard = ShareCoordinatorShard(
                    snapshot_update_records_per_snapshot=sp.shard.updates_per_snapshot,
                    time_ms=self.runtime.wall_clock_ms, partition_exists=self._partition_exists)
                await asyncio.sleep(LOAD_RETRY_BACKOFF_MS / 1000)
                continue
            if not current():
                return
            sp.loaded = True
            log.info("share coordinator: loaded %s-%d (epoch %d): %d records, %d keys%s",
                     self.topic, sp.index, sp.epoch, n, len(sp.shard.keys()),
                     f", {skipped} unreadable skipped" if skipped else "")
            if sp.queue and sp.worker is None:
                sp.worker = self._spawn(self._drain(sp))
            return

    # ------------------------------------------------------------------ operations
    async def write_state(self, req: WriteStateRequest) -> int:
        return await self._submit(req, lambda shard: shard.write_state(req), _code)

    async def read_state(self, req: ReadStateRequest) -> ReadStateResult:
        return await self._submit(req, lambda shard: shard.read_state(req), ReadStateResult)

    async def read_state_summary(self, req: ReadStateSummaryRequest) -> ReadStateSummaryResult:
        return await self._submit(req, lambda shard: ([], shard.read_state_summary(req)),
                                  ReadStateSummaryResult)

    async def initialize_state(self, req: InitializeStateRequest) -> int:
        return await self._submit(req, lambda shard: shard.initialize_state(req), _code)

    async def delete_state(self, req: DeleteStateRequest) -> int:
        return await self._submit(req, lambda shard: shard.delete_state(req), _code)

    def coordinator_error(self, group_id: str, topic_id: uuid.UUID, partition: int) -> ErrorCode:
        """NONE, or why this broker cannot serve the key now."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE
        sp = self.partitions.get(self.partition_for(group_id, topic_id, partition))
        if sp is None:
            return E.NOT_COORDINATOR
        return E.NONE if sp.loaded else E.COORDINATOR_LOAD_IN_PROGRESS

    async def _submit(self, req, compute, fail):
        err = self.coordinator_error(req.group_id, req.topic_id, req.partition)
        if err != E.NONE:
            return fail(err)
        sp = self.partitions[self.partition_for(req.group_id, req.topic_id, req.partition)]
        op = _Operation(ShareStateKey(req.group_id, req.topic_id, req.partition), compute, fail,
                        asyncio.get_running_loop().create_future())
        sp.queue.append(op)
        if sp.worker is None:
            sp.worker = self._spawn(self._drain(sp))
        return await op.future

    async def _drain(self, sp: _StatePartition) -> None:
        try:
            while sp.queue and self.partitions.get(sp.index) is sp:
                ops, sp.queue = sp.queue[:MAX_BATCH_OPERATIONS], sp.queue[MAX_BATCH_OPERATIONS:]
                await self._run_batch(sp, ops)
        finally:
            sp.worker = None
            if sp.queue and self.partitions.get(sp.index) is sp:
                sp.worker = self._spawn(self._drain(sp))

    async def _run_batch(self, sp: _StatePartition, ops: list[_Operation]) -> None:
        shard = sp.shard
        base = self.runtime.log_end_offset(self.topic, sp.index)
        saved = []
        records: list[ShareRecord] = []
        answers = []
        for op in ops:
            saved.append(shard.save(op.key))
            try:
                recs, answer = op.compute(shard)
            except Exception:  # noqa: BLE001 - a bug in one operation fails only it
                log.exception("share state operation on %s failed", op.key)
                recs, answer = [], op.fail(E.UNKNOWN_SERVER_ERROR)
            for r in recs:
                shard.replay(base + len(records), r)
                records.append(r)
            answers.append(answer)
        if records:
            start = self.runtime.timer.now_ms()
            result = await self.runtime.append(
                self.topic, sp.index, [self.codec.encode(r) for r in records],
                self.config.write_timeout_ms)
            self._note_latency(self.runtime.timer.now_ms() - start)
            sp.appends += 1
            code = E(result.error) if result.error in E._value2member_map_ \
                else E.UNKNOWN_SERVER_ERROR
            if code != E.NONE or result.base_offset != base:
                if code == E.NONE:  # someone else appended: state no longer matches offsets
                    log.error("%s-%d: append landed at %d, expected %d; reloading",
                              self.topic, sp.index, result.base_offset, base)
                    code = E.NOT_COORDINATOR
                    self._reload(sp)
                else:
                    log.warning("share state append to %s-%d failed: %s", self.topic, sp.index,
                                code.name)
                for s in reversed(saved):
                    shard.restore(s)
                mapped = COORDINATOR_APPEND_ERRORS.get(code, E.UNKNOWN_SERVER_ERROR)
                answers = [op.fail(mapped) for op in ops]
        for op, answer in zip(ops, answers, strict=True):
            if not op.future.done():
                op.future.set_result(answer)

    def _reload(self, sp: _StatePartition) -> None:
        if self.partitions.get(sp.index) is sp:
            self.on_resignation(sp.index)
            self.on_election(sp.index, sp.epoch)

    def _note_latency(self, ms: float) -> None:
        self.write_latency_ms.append(ms)
        if len(self.write_latency_ms) > 1024:
            del self.write_latency_ms[:512]

    # ------------------------------------------------------------------ pruning
    def _schedule_prune(self) -> None:
        if not self.active or self.config.prune_interval_ms <= 0:
            return
        self._prune_handle = self.runtime.timer.schedule(
            self.config.prune_interval_ms, lambda: self._spawn(self.prune()))

    async def prune(self) -> None:
        """Advance each loaded partition's log start to its prunable offset; reschedules."""
        try:
            for sp in list(self.partitions.values()):
                off = sp.shard.prunable_offset() if sp.loaded else None
                if off is None or off <= sp.pruned_to:
                    continue
                try:
                    sp.pruned_to = await self.runtime.delete_records_before(
                        self.topic, sp.index, off)
                except Exception as e:  # noqa: BLE001 - try again next interval
                    log.info("pruning %s-%d below %d failed: %r", self.topic, sp.index, off, e)
        finally:
            self._schedule_prune()

    # ------------------------------------------------------------------ metrics
    def stats(self) -> dict[str, int]:
        loaded = [sp for sp in self.partitions.values() if sp.loaded]
        return {"partitions": len(self.partitions), "loaded": len(loaded),
                "keys": sum(len(sp.shard.keys()) for sp in loaded),
                "appends": sum(sp.appends for sp in self.partitions.values())}
