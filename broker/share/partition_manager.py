"""The share-partition leader side of a broker (Kafka's SharePartitionManager).

One `SharePartition` (`coordinator.share.share_partition`) per (share group, topic id,
partition) for partitions this broker leads, created on first use by ShareFetch /
ShareAcknowledge: `load_share_partition` reads the state through the persister at the
partition's leader epoch (fencing an older leader) and rebuilds the in-flight records. Loads
of one key are shared by concurrent callers.

Per call (`partition`):
- the topic-partition must be hosted and led here: else NOT_LEADER_OR_FOLLOWER, or
  UNKNOWN_TOPIC_OR_PARTITION when the topic id is unknown;
- a cached SharePartition loaded at an older leader epoch, or fenced (its write was refused
  with FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH: AlterShareGroupOffsets, a newer leader), is
  closed and loaded afresh;
- its config is refreshed from the group's configs (`GroupConfigManager.
  share_partition_config`: lock duration, delivery limit, backoff, DLQ topic, ...; re-read
  at most once a second) and the log start offset is applied (retention, DeleteRecords).

Leadership: after every LeaderAndIsr / StopReplica the manager closes SharePartitions whose
partition this broker no longer leads (their timers stop; a new leader reloads the state).

Share sessions (`broker.share.sessions`): a session that closes, is replaced or evicted
releases what its member holds on each of its partitions (a member that vanishes without
closing its sessions loses its records at lock expiry, as in Kafka).

Listener: records becoming Available (release, lock expiry, backoff) wake parked ShareFetch
requests (`wake`, the fetch purgatory key of the topic-partition); durable dead-letter
intents go to the dead-letter writer (`broker.share.dead_letters`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from broker.purgatory import TopicPartitionKey
from broker.share.sessions import ShareSession, ShareSessionCache
from coordinator.share.config import SharePartitionConfig
from coordinator.share.load import LogOffsets, load_share_partition
from coordinator.share.share_partition import SharePartition
from coordinator.share.state import AcknowledgementBatch, DeadLetterIntent
from protocol.errors import ErrorCode, KafkaError

__all__ = ["SharePartitionManager"]

log = logging.getLogger(__name__)
E = ErrorCode
Key = tuple[str, uuid.UUID, int]
#: how long a group's resolved share settings are reused (ms)
CONFIG_REFRESH_MS = 1000


class SharePartitionManager:
    """See the module docstring."""

    def __init__(self, services, persister, timer, max_sessions: int = 2000) -> None:
        self.services = services
        self.persister = persister
        self.timer = timer  # coordinator.runtime.CoordinatorTimer
        self.partitions: dict[Key, SharePartition] = {}
        self._loading: dict[Key, asyncio.Task] = {}
        self._configs: dict[str, tuple[float, SharePartitionConfig]] = {}
        self.sessions = ShareSessionCache(max_sessions, on_close=self._session_closed)
        self.dead_letters = None  # broker.share.dead_letters.DeadLetterWriter
        self.on_wake = None  # callable(topic, partition): parked ShareFetches re-check
        self.fetcher = None  # broker.share.fetch.ShareFetcher
        self.metrics = None  # broker.share.metrics.ShareMetrics
        self._tasks: set[asyncio.Task] = set()
        self.active = True

    # ------------------------------------------------------------------ lookup / load
    def topic_partition(self, topic_id: uuid.UUID, partition: int):
        """(topic name, Partition) this broker leads, or raises KafkaError."""
        cache = self.services.metadata_cache
        name = cache.topic_name(topic_id)
        if name is None:
            raise KafkaError(E.UNKNOWN_TOPIC_ID, f"unknown topic id {topic_id}")
        rm = self.services.replica_manager
        part = rm.get_partition(name, partition)
        if part is None or not part.is_leader or part.deleted:
            if part is None and not cache.contains_partition(name, partition):
                raise KafkaError(E.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"unknown partition {name}-{partition}")
            raise KafkaError(E.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.services.broker_id} does not lead {name}-{partition}")
        return name, part

    def config_for(self, group_id: str) -> SharePartitionConfig:
        """The group's settings, re-read at most every `CONFIG_REFRESH_MS` (a GROUP config
        change applies within that)."""
        now = time.monotonic()
        cached = self._configs.get(group_id)
        if cached is not None and now - cached[0] < CONFIG_REFRESH_MS / 1000:
            return cached[1]
        manager = getattr(self.services, "group_configs", None)
        cfg = SharePartitionConfig() if manager is None else \
            manager.share_partition_config(group_id)
        if len(self._configs) > 10_000:
            self._configs.clear()
        self._configs[group_id] = (now, cfg)
        return cfg

    async def partition(self, group_id: str, topic_id: uuid.UUID, index: int,
                        refresh: bool = False) -> SharePartition | ErrorCode:
        """The loaded SharePartition, or the error to answer for this partition. `refresh`
        (a member opens a share session on it): an idle one (nothing acquired, nothing being
        written) is loaded afresh, so offsets altered or deleted while the group was empty
        take effect."""
        try:
            name, part = self.topic_partition(topic_id, index)
        except KafkaError as e:
            return e.code
        key = (group_id, topic_id, index)
        sp = self.partitions.get(key)
        if sp is not None and refresh and sp.idle():
            self._drop(key, sp)
            sp = None
        if sp is not None and (sp.fenced is not None or sp.leader_epoch != part.leader_epoch):
            self._drop(key, sp)
            sp = None
        if sp is None:
            task = self._loading.get(key)
            if task is None:
                task = asyncio.get_running_loop().create_task(self._load(key, part))
                self._loading[key] = task
                task.add_done_callback(lambda _t, k=key: self._loading.pop(k, None))
            result = await asyncio.shield(task)
            if isinstance(result, ErrorCode):
                return result
            sp = result
        sp.config = self.config_for(group_id)
        sp.update_log_start_offset(part.log_start_offset)
        return sp

    async def _load(self, key: Key, part) -> SharePartition | ErrorCode:
        group_id, topic_id, index = key
        start = time.monotonic()
        plog = part.log
        epoch = part.leader_epoch

        def offset_for_timestamp(ts: int) -> int | None:
            try:
                _, offset, _ = part.fetch_offset_for_timestamp(ts, None)
            except KafkaError:
                return None
            return None if offset < 0 else offset

        result = await load_share_partition(
            group_id, topic_id, index, config=self.config_for(group_id), timer=self.timer,
            persister=self.persister, leader_epoch=epoch,
            log=LogOffsets(plog.log_start_offset, plog.high_watermark, part.last_stable_offset,
                           offset_for_timestamp),
            wall_clock_ms=int(time.time() * 1000), listener=self)
        if isinstance(result, ErrorCode):
            log.info("loading share-partition %s:%s-%d failed: %s", group_id, part.topic, index,
                     result.name)
            return result
        if not self.active or not part.is_leader or part.leader_epoch != epoch:
            result.close()
            return E.NOT_LEADER_OR_FOLLOWER
        self.partitions[key] = result
        ms = (time.monotonic() - start) * 1000
        if self.metrics is not None:
            self.metrics.load_time.update(ms)
        log.info("share-partition %s:%s-%d loaded at leader epoch %d (SPSO %d, SPEO %d) in "
                 "%.1f ms", group_id, part.topic, index, epoch, result.start_offset,
                 result.end_offset, ms)
        return result

    def _drop(self, key: Key, sp: SharePartition) -> None:
        if self.partitions.get(key) is sp:
            del self.partitions[key]
        sp.close()

    # ------------------------------------------------------------------ acknowledgements
    async def acknowledge(self, group_id: str, member_id: str,
                          acks: dict[tuple[uuid.UUID, int], list[AcknowledgementBatch]]
                          ) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """Apply acknowledgements per partition (concurrently); the error code of each."""
        async def one(tp, batches) -> ErrorCode:
            sp = await self.partition(group_id, *tp)
            if isinstance(sp, ErrorCode):
                return sp
            return ErrorCode(await sp.acknowledge(member_id, batches))

        items = list(acks.items())
        codes = await asyncio.gather(*(one(tp, b) for tp, b in items))
        return {tp: code for (tp, _), code in zip(items, codes, strict=True)}

    def release_member(self, group_id: str, member_id: str,
                       keys: list[tuple[uuid.UUID, int]] | None = None) -> None:
        """Release what `member_id` holds (every partition of the group when `keys` is
        None), in the background."""
        for (g, tid, p), sp in list(self.partitions.items()):
            if g == group_id and (keys is None or (tid, p) in keys):
                self._spawn(sp.release_acquired_records(member_id))

    def _session_closed(self, session: ShareSession) -> None:
        self.release_member(session.group_id, session.member_id, list(session.partitions))

    # ------------------------------------------------------------------ leadership
    def on_leadership_changed(self) -> None:
        rm = self.services.replica_manager
        for key, sp in list(self.partitions.items()):
            name = self.services.metadata_cache.topic_name(key[1])
            part = rm.get_partition(name, key[2]) if name is not None else None
            if part is None or not part.is_leader or part.leader_epoch != sp.leader_epoch \
                    or part.deleted:
                log.info("share-partition %s:%s-%d: no longer leader, closed", key[0], name,
                         key[2])
                self._drop(key, sp)

    # ------------------------------------------------------------------ listener
    def on_records_available(self, partition: SharePartition) -> None:
        if self.on_wake is None:
            return
        name = self.services.metadata_cache.topic_name(partition.topic_id)
        if name is not None:
            self.on_wake(TopicPartitionKey(name, partition.partition))

    def on_dead_letters(self, partition: SharePartition, intents: list[DeadLetterIntent]
                        ) -> None:
        if self.dead_letters is not None:
            self.dead_letters.submit(partition, intents)

    # ------------------------------------------------------------------ stats / lifecycle
    def group_stats(self) -> dict[str, dict[str, int]]:
        """Per group: share-partitions, in_flight, available, acquired, delayed and pending
        dead letters (records), over the share-partitions this broker leads."""
        out: dict[str, dict[str, int]] = {}
        for (g, _tid, _p), sp in self.partitions.items():
            st = sp.stats()
            agg = out.setdefault(g, {"partitions": 0, "in_flight": 0, "available": 0,
                                     "acquired": 0, "delayed": 0, "pending_dead_letters": 0})
            agg["partitions"] += 1
            for k in ("in_flight", "available", "acquired", "delayed", "pending_dead_letters"):
                agg[k] += getattr(st, k)
        return out

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def shutdown(self) -> None:
        self.active = False
        for key, sp in list(self.partitions.items()):
            self._drop(key, sp)
        for t in list(self._tasks) + list(self._loading.values()):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                pass
