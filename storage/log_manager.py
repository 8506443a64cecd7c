"""`LogManager`: every partition log of this broker over one or more `log.dirs`.

Per log dir (Kafka's layout): `meta.properties`, `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `replication-offset-checkpoint`, `.kafka_cleanshutdown` (present
only between a clean shutdown and the next start) and one directory per partition
`<topic>-<partition>`. A new partition goes to the live dir holding the fewest partitions.
Deleting renames the directory to `<topic>-<partition>.<uuid hex>-delete` and removes it in the
background after `file.delete.delay.ms`; such leftovers, and `*.tmp` files of interrupted
checkpoint writes, are removed at startup.

Failed dirs (KIP-112): an I/O error in a dir's files (`io_error`) marks the dir offline
through `failure_channel` (storage.log_dir_failure); the broker then calls
`handle_log_dir_failure(dir)`, which forgets the dir's logs. A dir that cannot be loaded at
startup starts offline; only when every dir fails does startup fail. Offline dirs get no
checkpoints, flushes or `.kafka_cleanshutdown` (the next start recovers them).

Background work runs as asyncio tasks on the broker's loop; anything that fsyncs or unlinks
runs in the default executor, so the loop never blocks on the disk:
- retention every `log.retention.check.interval.ms` (300000),
- flush of logs past `flush.ms`/`flush.messages` every `log.flush.scheduler.interval.ms`,
- recovery-point checkpoint every `log.flush.offset.checkpoint.interval.ms` (60000),
- log-start-offset checkpoint every `log.flush.start.offset.checkpoint.interval.ms` (60000),
- high-watermark checkpoint (`replication-offset-checkpoint`) every
  `replica.high.watermark.checkpoint.interval.ms` (5000),
- log compaction of `cleanup.policy=compact` logs by `storage.cleaner.LogCleaner` (its
  `cleaner-offset-checkpoint` per dir) when `log.cleaner.enable`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable

from protocol.errors import ErrorCode, KafkaError
from storage.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    fsync_dir,
    gather_offsets,
    read_meta_properties,
    sync_filesystem,
    write_meta_properties,
)
from storage.cleaner import CleanerConfig, LogCleaner
from storage.config import LogConfig
from storage.log import Log, parse_topic_partition, wall_clock_ms
from storage.log_dir_failure import LogDirFailureChannel, is_resource_limit, storage_error
from storage.log_transactions import CHANGE_STAMPS, LogTransactions
from storage.segment import LogSegment

TopicPartition = tuple[str, int]
log_ = logging.getLogger(__name__)
SHUTDOWN_SYNC_THREADS = 16
SHUTDOWN_CHUNK = 64  # logs per task of the shutdown pool


def _close_log(log: Log) -> None:
    """Close one log at shutdown (a thread of the shutdown pool: logs are independent),
    without fsyncs: `close_all` syncs each log dir's file system once afterwards."""
    log.close(sync=False)


class LogManager:
    def __init__(self, log_dirs: list[str], default_config: LogConfig, *,
                 broker_id: int = 0, cluster_id: str | None = None,
                 time_ms: Callable[[], int] = wall_clock_ms,
                 retention_check_interval_ms: int = 300_000,
                 flush_check_interval_ms: int = 1_000,
                 recovery_point_checkpoint_interval_ms: int = 60_000,
                 log_start_offset_checkpoint_interval_ms: int = 60_000,
                 replication_checkpoint_interval_ms: int = 5_000,
                 cleaner_config: CleanerConfig | None = None,
                 producer_id_expiration_ms: int = 86_400_000,
                 producer_id_expiration_check_interval_ms: int = 600_000):
        if not log_dirs:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "log.dirs is empty")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.time_ms = time_ms
        self.intervals = {
            "retention": retention_check_interval_ms,
            "flush": flush_check_interval_ms,
            "recovery_point": recovery_point_checkpoint_interval_ms,
            "log_start": log_start_offset_checkpoint_interval_ms,
            "replication": replication_checkpoint_interval_ms,
            "producer_expiry": producer_id_expiration_check_interval_ms,
        }
        self.producer_id_expiration_ms = producer_id_expiration_ms
        #: called as ``flush_observer(ms)`` after each flush (roll, flush.messages, flush.ms):
        #: the broker's LogFlushStats timer; may run in an executor thread
        self.flush_observer: Callable[[float], object] | None = None
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, str] = {}
        self._tasks: list[asyncio.Task] = []
        self._pending: set[asyncio.Future] = set()
        self._doomed: set[LogSegment] = set()  # renamed .deleted, unlinked after a delay
        self._deleting: dict[str, Log] = {}  # renamed -delete dirs awaiting removal
        self._loop: asyncio.AbstractEventLoop | None = None
        self._checkpoint_lock = threading.Lock()
        #: (file name, dir) -> the entries last written there: a periodic checkpoint whose
        #: entries did not change is not written again (100,000 partitions rewrote the
        #: high-watermark file every 5 s: 17% of an idle broker, issue 22's profile)
        self._checkpoint_written: dict[tuple[str, str], dict] = {}
        #: file name -> (logs version, change count, live dirs) when it was last written in
        #: full: the high-watermark checkpoint is not even gathered while nothing changed
        self._checkpoint_stamp: dict[str, tuple] = {}
        #: a fresh stamp after every change to the set of logs (added, replaced, removed)
        self.logs_version = 0
        self.had_clean_shutdown: dict[str, bool] = {}
        self.failure_channel = LogDirFailureChannel()
        self._offline_logs: set[Log] = set()  # of failed dirs, closed after a delay
        self.cleaner = LogCleaner(self, cleaner_config or CleanerConfig(), time_ms)
        # every log's on_roll / on_flush_needed hook: one bound method, not one per log
        self._on_roll = self._on_roll
        self._on_delete_segments = self._on_delete_segments

    # --- startup / shutdown -----------------------------------------------------------------
    async def startup(self, background: bool = True) -> None:
        """Create/verify each log dir, load and recover every partition (in the executor),
        then start the background tasks. Raises INCONSISTENT_CLUSTER_ID / KAFKA_STORAGE_ERROR
        when `meta.properties` names another cluster/broker."""
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, self.load_all)
        await self.cleaner.startup(workers=background)
        if background:
            for name, fn in (("retention", self.cleanup_logs), ("flush", self.flush_dirty_logs),
                             ("recovery_point", self.checkpoint_recovery_points_async),
                             ("log_start", self.checkpoint_log_start_offsets_async),
                             ("replication", self.checkpoint_replication_offsets_async),
                             ("producer_expiry", self.remove_expired_producers)):
                self._tasks.append(asyncio.create_task(self._every(self.intervals[name], fn),
                                                       name=f"log-manager-{name}"))

    def load_all(self) -> None:
        """Blocking load of every dir (used by `startup` through the executor, and by tools
        and crash tests that run without an event loop). A dir failing with an I/O error
        starts offline; KAFKA_STORAGE_ERROR when no dir could be loaded.

        The cyclic GC is off while loading: the load builds millions of long-lived objects
        and no cycles worth finding, and each collection pass over them found nothing (20% of
        the CPU of loading 30,000 logs, issue 22); the broker collects once and freezes the
        heap after startup (`broker.server`)."""
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for d in self.log_dirs:
                try:
                    self._load_dir(d)
                except OSError as e:
                    if is_resource_limit(e):
                        raise
                    self.failure_channel.maybe_add_offline_log_dir(d, "loading the log dir", e)
                    self._forget_dir(d, delay_close=False)
        finally:
            if gc_was_enabled:
                gc.enable()
        if not self.live_log_dirs:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             "none of the specified log dirs from " + ", ".join(self.log_dirs)
                             + " can be created or validated")

    def _load_dir(self, d: str) -> None:
        """Load one dir (OSError: the dir goes offline, see `load_all`)."""
        os.makedirs(d, exist_ok=True)
        self._check_meta(d)
        for name in os.listdir(d):  # interrupted checkpoint writes
            if name.endswith(".tmp") and os.path.isfile(os.path.join(d, name)):
                os.unlink(os.path.join(d, name))
        marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        self.had_clean_shutdown[d] = clean
        recovery = OffsetCheckpointFile(os.path.join(d, RECOVERY_POINT_CHECKPOINT)).read()
        starts = OffsetCheckpointFile(os.path.join(d, LOG_START_OFFSET_CHECKPOINT)).read()
        hws = OffsetCheckpointFile(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).read()
        found = []
        with os.scandir(d) as entries:
            for entry in entries:
                name = entry.name
                if not entry.is_dir():
                    continue
                if name.endswith(("-delete", "-future")):
                    # a -future replica whose move a restart interrupted is abandoned
                    shutil.rmtree(entry.path, ignore_errors=True)
                    continue
                try:
                    found.append((parse_topic_partition(name), entry.path))
                except KafkaError:
                    continue
        found.sort()
        for tp, path in found:
            log = Log(path, self.default_config, recovery_point=recovery.get(tp, 0),
                      log_start_offset=starts.get(tp, 0), clean_shutdown=clean,
                      time_ms=self.time_ms, on_roll=self._on_roll,
                      on_flush_needed=self._on_roll, exists=True, topic_partition=tp)
            self._attach(log)
            log.high_watermark = max(log.log_start_offset,
                                     min(hws.get(tp, 0), log.log_end_offset))
            self._logs[tp] = log
            self._log_dir_of[tp] = d
        self.logs_version = next(CHANGE_STAMPS)
        if clean:
            os.unlink(marker)
            fsync_dir(d)

    def _check_meta(self, d: str) -> None:
        props = read_meta_properties(d)
        if props is None:
            write_meta_properties(d, self.broker_id, self.cluster_id)
            return
        if self.cluster_id is not None and props.get("cluster.id") not in (None, self.cluster_id):
            raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                             f"{d}: cluster.id {props.get('cluster.id')} != {self.cluster_id}")
        stored = props.get("broker.id", props.get("node.id"))
        if stored is not None and int(stored) != self.broker_id:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"{d}: broker.id {stored} != configured {self.broker_id}")
        if self.cluster_id is not None and "cluster.id" not in props:
            write_meta_properties(d, self.broker_id, self.cluster_id)

    async def shutdown(self) -> None:
        """Stop background tasks, flush and close every log, write the checkpoints and
        `.kafka_cleanshutdown` in each dir (all disk work in the executor)."""
        await self.cleaner.shutdown()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, self.close_all)

    def close_all(self) -> None:
        """Blocking clean shutdown (see `shutdown`). A dir failing now goes offline and gets
        no `.kafka_cleanshutdown`: its next start recovers it."""
        for seg in list(self._doomed):
            self._doomed.discard(seg)
            with contextlib.suppress(OSError):
                seg.delete_files()
        for target in list(self._deleting):
            log = self._deleting.pop(target)
            log.close_handlers()
            shutil.rmtree(target, ignore_errors=True)
        for log in list(self._offline_logs):
            self._close_offline(log)
        logs = list(self._logs.values())
        # fsyncs of many logs at once share the file system's journal commits (100,000
        # partitions: one at a time took minutes)
        # in chunks: a future per log (100,000 of them) cost more than the closing itself
        chunks = [logs[i:i + SHUTDOWN_CHUNK] for i in range(0, len(logs), SHUTDOWN_CHUNK)]
        with concurrent.futures.ThreadPoolExecutor(SHUTDOWN_SYNC_THREADS) as pool:
            for _ in pool.map(lambda chunk: [self._guarded(lg, "flush at shutdown", lg.flush)
                                             for lg in chunk], chunks):
                pass
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
            self.checkpoint_replication_offsets()
            closed = [ok for oks in pool.map(  # epoch checkpoints, snapshots, indexes; no fsyncs
                lambda chunk: [self._guarded(lg, "closing the log", _close_log, lg)
                               for lg in chunk], chunks) for ok in oks]
        for log, ok in zip(logs, closed, strict=True):
            if not ok:
                log.close_handlers()
        for d in self.live_log_dirs:
            try:
                sync_filesystem(d)  # one syncfs per dir instead of fsyncs per file
                with open(os.path.join(d, CLEAN_SHUTDOWN_FILE), "wb") as f:
                    os.fsync(f.fileno())
                fsync_dir(d)
            except OSError as e:
                self.io_error(d, "writing the clean shutdown marker", e)
        self._logs.clear()

    def _guarded(self, log: Log, what: str, fn, *args) -> bool:
        """Run `fn(*args)` for `log`; an OSError takes the log's dir offline (False)."""
        try:
            fn(*args)
            return True
        except OSError as e:
            self.io_error(self.dir_of(log), f"{what} of {os.path.basename(log.dir)}", e)
            return False

    # --- failed dirs (KIP-112) ------------------------------------------------------------------
    @property
    def live_log_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if not self.failure_channel.is_offline(d)]

    @staticmethod
    def dir_of(log: Log) -> str:
        """The log dir holding `log` (its partition directory's parent)."""
        return os.path.dirname(os.path.abspath(log.dir))

    def io_error(self, log_dir: str | None, what: str, exc: BaseException) -> KafkaError:
        """Kafka's maybeHandleIOException: the KAFKA_STORAGE_ERROR for an OSError in `what`,
        after marking `log_dir` offline (once; not for a resource limit such as EMFILE)."""
        if log_dir is not None and not is_resource_limit(exc):
            self.failure_channel.maybe_add_offline_log_dir(log_dir, what, exc)
        return storage_error(what, exc)

    def handle_log_dir_failure(self, log_dir: str) -> list[TopicPartition]:
        """Forget every log of the offline `log_dir` (Kafka's LogManager.handleLogDirFailure):
        no more checkpoints, flushes, retention or cleaning there. Their files are closed
        after `file.delete.delay.ms` (in-flight zero-copy reads may still use them).
        Returns the partitions that went offline."""
        tps = self._forget_dir(log_dir, delay_close=True)
        log_.warning("Logs for partitions %s are offline due to failure on log directory %s",
                     ",".join(f"{t}-{p}" for t, p in sorted(tps)) or "(none)", log_dir)
        return tps

    def _forget_dir(self, log_dir: str, delay_close: bool) -> list[TopicPartition]:
        tps = [tp for tp, d in self._log_dir_of.items() if d == log_dir]
        loop = self._running_loop() if delay_close else None
        for tp in tps:
            log = self._logs.pop(tp, None)
            self._log_dir_of.pop(tp, None)
            self.logs_version = next(CHANGE_STAMPS)
            self.cleaner.forget(tp)
            if log is None:
                continue
            if loop is not None:
                self._offline_logs.add(log)
                loop.call_later(log.config.file_delete_delay_ms / 1000, self._close_offline, log)
            else:
                log.close_handlers()
        return tps

    def _close_offline(self, log: Log) -> None:
        if log in self._offline_logs:
            self._offline_logs.discard(log)
            log.close_handlers()

    # --- partitions -------------------------------------------------------------------------
    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tuple(tp))

    def all_logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def log_dir_of(self, tp: TopicPartition) -> str | None:
        return self._log_dir_of.get(tuple(tp))

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None,
                          topic_id: str | None = None) -> Log:
        """The partition's log, created (in the dir with the fewest partitions) if absent.
        Creating does small synchronous I/O (mkdir + empty files), as Kafka's does."""
        tp = (tp[0], int(tp[1]))
        log = self._logs.get(tp)
        if log is not None:
            if config is not None:
                log.config = config
            return log
        if not tp[0] or "/" in tp[0] or tp[0] in (".", ".."):
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"bad topic name {tp[0]!r}")
        d = self._pick_dirs(1)[0]
        try:
            log = self._new_log(tp, d, config, topic_id)
        except OSError as e:
            raise self.io_error(d, f"creating log for {tp[0]}-{tp[1]}", e) from e
        self._register(tp, d, log)
        return log

    def _pick_dirs(self, n: int) -> list[str]:
        """Live dirs for `n` new logs, each to the dir holding the fewest partitions so far
        (one count of the existing logs, not one per new log). KAFKA_STORAGE_ERROR when
        every dir is offline."""
        live = self.live_log_dirs
        if not live:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             "cannot create a log: every log dir is offline")
        if len(live) == 1:
            return live * n
        counts = {d: 0 for d in live}
        for d in self._log_dir_of.values():
            if d in counts:
                counts[d] += 1
        out = []
        for _ in range(n):
            d = min(live, key=lambda x: counts[x])
            counts[d] += 1
            out.append(d)
        return out

    def _new_log(self, tp: TopicPartition, d: str, config: LogConfig | None,
                 topic_id: str | None) -> Log:
        """Create (or load) the log in `d` without registering it (any thread)."""
        return Log(os.path.join(d, f"{tp[0]}-{tp[1]}"), config or self.default_config,
                   clean_shutdown=True, time_ms=self.time_ms, on_roll=self._on_roll,
                   on_flush_needed=self._on_roll, topic_id=topic_id)

    def _register(self, tp: TopicPartition, d: str, log: Log) -> None:
        self._attach(log)
        self._logs[tp] = log
        self._log_dir_of[tp] = d
        self.logs_version = next(CHANGE_STAMPS)

    async def create_logs(self, specs: list[tuple[TopicPartition, LogConfig | None, str | None]]
                          ) -> dict[TopicPartition, Exception]:
        """Create the logs of `specs` (``(tp, config, topic id)``) that do not exist yet, with
        the directory and file creation in the executor (a LeaderAndIsr for thousands of new
        partitions does not hold the event loop for the disk's time); they are registered
        on the loop. Returns the partitions that failed, with their error (OSError /
        KafkaError); `get_or_create_log` answers for them again."""
        todo: dict[TopicPartition, tuple[LogConfig | None, str | None]] = {}
        for tp, config, topic_id in specs:
            tp = (tp[0], int(tp[1]))
            if tp not in self._logs and tp[0] and "/" not in tp[0] and tp[0] not in (".", ".."):
                todo[tp] = (config, topic_id)
        failed: dict[TopicPartition, Exception] = {}
        if not todo:
            return failed
        try:
            dirs = self._pick_dirs(len(todo))
        except KafkaError as e:
            return dict.fromkeys(todo, e)
        items = [(tp, d, *todo[tp]) for tp, d in zip(todo, dirs, strict=True)]

        def build(chunk):
            out = []
            for tp, d, config, topic_id in chunk:
                try:
                    out.append((tp, d, self._new_log(tp, d, config, topic_id)))
                except (OSError, KafkaError) as e:
                    out.append((tp, d, e))
            return out

        loop = asyncio.get_running_loop()
        for i in range(0, len(items), 256):
            for tp, d, got in await loop.run_in_executor(None, build, items[i:i + 256]):
                if isinstance(got, Exception):
                    failed[tp] = got
                elif tp in self._logs:  # created meanwhile on the loop: keep that one
                    got.close_handlers()
                else:
                    self._register(tp, d, got)
        return failed

    def replace_log(self, tp: TopicPartition, new_log: Log, new_dir: str) -> None:
        """AlterReplicaLogDirs (KIP-113): ``new_log`` (the promoted future replica, already in
        ``new_dir`` under the partition's own name) takes the partition over; the old log
        is retired like a deleted one (renamed ``-delete``, removed after
        ``file.delete.delay.ms``)."""
        tp = (tp[0], int(tp[1]))
        old = self._logs.get(tp)
        self._attach(new_log)
        self._logs[tp] = new_log
        self._log_dir_of[tp] = new_dir
        self.logs_version = next(CHANGE_STAMPS)
        if old is not None and old is not new_log:
            self._retire(tp, old)

    def delete_log(self, tp: TopicPartition) -> bool:
        """Remove the partition: close its files, rename its dir to
        `<topic>-<n>.<uuid hex>-delete` (topic shortened to fit 255 bytes), delete it in the
        background. False if unknown."""
        tp = (tp[0], int(tp[1]))
        log = self._logs.pop(tp, None)
        d = self._log_dir_of.pop(tp, None)
        self.logs_version = next(CHANGE_STAMPS)
        if log is None or d is None:
            return False
        self.cleaner.forget(tp)
        self._retire(tp, log)
        return True

    def _retire(self, tp: TopicPartition, log: Log) -> None:
        # Kafka's LocalLog.logDeleteDirName: the topic part is shortened so that the name
        # fits 255 bytes (a 249-character topic would otherwise fail with ENAMETOOLONG)
        suffix = f"-{tp[1]}.{uuid.uuid4().hex}-delete"
        topic = tp[0].encode()[:255 - len(suffix)].decode(errors="ignore")
        target = os.path.join(os.path.dirname(log.dir), topic + suffix)
        os.rename(log.dir, target)  # open files stay valid for in-flight sendfile slices
        delay = log.config.file_delete_delay_ms
        self._deleting[target] = log
        if self._running_loop() is not None:
            self._running_loop().call_later(delay / 1000, self._finish_delete, target)
        else:
            self._finish_delete(target)

    def _finish_delete(self, target: str) -> None:
        log = self._deleting.pop(target, None)
        if log is None:
            return

        def remove():
            log.close_handlers()
            shutil.rmtree(target, ignore_errors=True)
        if self._running_loop() is not None:
            self._submit(remove)
        else:
            remove()

    # --- hooks given to each Log --------------------------------------------------------------
    def _running_loop(self) -> asyncio.AbstractEventLoop | None:
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            return None

    def _submit(self, fn, *args) -> asyncio.Future | None:
        loop = self._loop
        if loop is None:
            fn(*args)
            return None
        fut = loop.run_in_executor(None, fn, *args)
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        fut.add_done_callback(_retrieve)  # errors were reported (failure channel)
        return fut

    async def _in_executor(self, fn, *args):
        """Run a background job's blocking part in the executor, tracked in `_pending` and
        shielded: cancelling the job's task (shutdown) cannot stop the thread, so shutdown
        waits for it before `close_all` writes the final checkpoints."""
        fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        return await asyncio.shield(fut)

    def _on_roll(self, log: Log, new_base: int) -> asyncio.Future | None:
        """Flush `log` below `new_base` (roll, or flush.messages reached): in the executor
        when called on the loop, returning the future; at once otherwise."""
        if self._running_loop() is not None:
            return self._submit(self._timed_flush, log, new_base)
        self._timed_flush(log, new_base)
        return None

    def _timed_flush(self, log: Log, offset: int | None = None) -> None:
        """Flush (executor); an OSError takes the dir offline and raises KAFKA_STORAGE_ERROR
        (the produce waiting for this fsync answers it)."""
        observer = self.flush_observer
        start = time.monotonic_ns()
        try:
            log.flush(offset)
        except OSError as e:
            raise self.io_error(self.dir_of(log), f"flush of {os.path.basename(log.dir)}",
                                e) from e
        if observer is not None:
            observer((time.monotonic_ns() - start) / 1e6)

    def _attach(self, log: Log) -> None:
        """Give `log` its segment-deletion hook, called with the log so the delay is the
        topic's own `file.delete.delay.ms` (read when the segments go: live changes count);
        one bound method shared by every log."""
        log.on_delete_segments = self._on_delete_segments

    def _on_delete_segments(self, log: Log, segs: list[LogSegment]) -> None:
        loop = self._running_loop()
        if loop is None:
            for s in segs:
                s.delete_files()
            return
        delay = log.config.file_delete_delay_ms
        for s in segs:
            self._doomed.add(s)
            loop.call_later(delay / 1000, self._delete_doomed, s)

    def _delete_doomed(self, seg: LogSegment) -> None:
        if seg in self._doomed:
            self._doomed.discard(seg)
            self._submit(self._delete_segment_files, seg)

    def _delete_segment_files(self, seg: LogSegment) -> None:
        try:
            seg.delete_files()
        except OSError as e:
            self.io_error(os.path.dirname(os.path.dirname(os.path.abspath(seg.log_path))),
                          "deleting a segment", e)

    # --- background jobs ----------------------------------------------------------------------
    async def remove_expired_producers(self) -> int:
        """Kafka's producer-expiry-check: every log forgets producers (and KIP-890
        verification states) idle for `producer.id.expiration.ms` that have no open
        transaction. Returns how many producers were removed."""
        now = self.time_ms()
        removed = 0
        for lg in list(self._logs.values()):
            ps = lg.producer_state
            ps.producer_id_expiration_ms = self.producer_id_expiration_ms
            removed += ps.remove_expired_producers(now)
        return removed

    async def _every(self, interval_ms: int, fn) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except KafkaError as e:
                if e.code != ErrorCode.KAFKA_STORAGE_ERROR:  # else reported once already
                    log_.exception("log manager task failed")
            except Exception:  # keep the scheduler alive; errors surface in the log
                log_.exception("log manager task failed")

    async def cleanup_logs(self) -> int:
        """Retention pass over every log (renames on the loop, unlinks in the executor).
        Returns the number of segments deleted."""
        n = 0
        for log in list(self._logs.values()):
            if "delete" in log.config.cleanup_policy:
                try:
                    n += log.delete_old_segments()
                except OSError as e:
                    self.io_error(self.dir_of(log), "retention", e)
        return n

    async def flush_dirty_logs(self) -> None:
        """Flush logs whose unflushed data is older than their flush.ms (in the executor)."""
        for log in list(self._logs.values()):
            if log.needs_time_flush():
                with contextlib.suppress(KafkaError):  # a failed dir: reported once
                    await self._in_executor(self._timed_flush, log)

    async def checkpoint_recovery_points_async(self) -> None:
        await self._in_executor(self.checkpoint_recovery_points)

    async def checkpoint_replication_offsets_async(self) -> None:
        await self._in_executor(self.checkpoint_replication_offsets)

    async def checkpoint_log_start_offsets_async(self) -> None:
        await self._in_executor(self.checkpoint_log_start_offsets)

    def _checkpoint(self, name: str, attribute: str, changes: Callable[[], int] | None = None
                    ) -> None:
        """Write `name` in every live dir from each log's `attribute`. With `changes` (a
        count that grows whenever any log's `attribute` changes), nothing is gathered while
        neither it nor the set of logs or live dirs changed since the last full write: the
        stamp is read before the entries, and bumped after each change, so a change made
        while gathering is written next time."""
        # one writer at a time: a periodic job still running in its executor thread when
        # shutdown writes the same file would share `<name>.tmp`, or write older values last
        with self._checkpoint_lock:
            stamp = None
            if changes is not None:
                stamp = (self.logs_version, changes(), tuple(self.live_log_dirs))
                if self._checkpoint_stamp.get(name) == stamp:
                    return
            self._checkpoint_stamp.pop(name, None)
            per_dir = gather_offsets(list(self._logs.items()), attribute, self.live_log_dirs,
                                     None if len(self.log_dirs) == 1 else self._log_dir_of)
            written = True
            for d, entries in per_dir.items():
                if self._checkpoint_written.get((name, d)) == entries:
                    continue
                try:
                    OffsetCheckpointFile(os.path.join(d, name)).write(entries)
                except OSError as e:
                    written = False
                    self._checkpoint_written.pop((name, d), None)
                    self.io_error(d, f"writing {name}", e)
                else:
                    self._checkpoint_written[(name, d)] = entries
            if stamp is not None and written:
                self._checkpoint_stamp[name] = stamp

    def checkpoint_recovery_points(self) -> None:
        """Write `recovery-point-offset-checkpoint` in every dir (blocking)."""
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, "recovery_point", Log.offset_changes)

    def checkpoint_log_start_offsets(self) -> None:
        """Write `log-start-offset-checkpoint` in every dir (blocking)."""
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, "log_start_offset", Log.offset_changes)

    def checkpoint_replication_offsets(self) -> None:
        """Write `replication-offset-checkpoint` (high watermarks) in every dir (blocking);
        a background task does it every `replica.high.watermark.checkpoint.interval.ms`;
        while no high watermark moved it gathers nothing (an idle broker of 30,000
        partitions spent a third of its CPU rebuilding the unchanged entries, issue 22)."""
        self._checkpoint(REPLICATION_OFFSET_CHECKPOINT, "_high_watermark",
                         LogTransactions.high_watermark_changes)

    def read_replication_offsets(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for d in self.log_dirs:
            out.update(OffsetCheckpointFile(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).read())
        return out


def _retrieve(fut: asyncio.Future) -> None:
    """Mark a background future's exception as seen (no "never retrieved" warning)."""
    if not fut.cancelled():
        fut.exception()
