"""ReplicaAlterLogDirsManager: move a partition between ``log.dirs`` (KIP-113, Kafka's JBOD
ReplicaAlterLogDirsThread), while it keeps serving produce and fetch.

A move of ``topic-p`` to directory ``D``:

1. a **future replica** is created in ``D`` as ``topic-p.<uuid>-future`` (Kafka's name);
2. a task copies the current log's batches into it, offsets kept (``append_as_follower``:
   leader epochs and producer state come with the batches), reading with the disk work in
   the executor, until the future log reaches the current log end offset;
3. the future log is flushed, closed, renamed to ``D/topic-p`` and reopened (executor);
4. on the event loop, without yielding: the batches appended meanwhile are copied, the high
   watermark carried over, and the LogManager and the Partition switch to the new log; the
   old directory is renamed ``-delete`` and removed after ``file.delete.delay.ms`` (open
   file slices of in-flight fetches stay readable).

Nothing acknowledged is lost: every append lands in the current log, and the switch happens
only when the new log holds the same offsets. A move to the directory already holding the
partition cancels a running move. A restart abandons an unfinished move (the ``-future``
directory is deleted at startup; Kafka resumes it). ``future(tp)`` exposes a running move
for DescribeLogDirs (``is_future_key``, ``offset_lag``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import uuid

from protocol.errors import ErrorCode, KafkaError
from storage.checkpoints import fsync_dir
from storage.log import Log

__all__ = ["ReplicaAlterLogDirsManager"]

log = logging.getLogger(__name__)
COPY_CHUNK_BYTES = 1 << 20
_SIZE = struct.Struct(">qi")  # base offset, batch length


def complete_batches(data: bytes) -> bytes:
    """The prefix of ``data`` made of whole record batches (a read may end mid-batch)."""
    pos = 0
    while pos + 12 <= len(data):
        _, length = _SIZE.unpack_from(data, pos)
        if length <= 0 or pos + 12 + length > len(data):
            break
        pos += 12 + length
    return data[:pos]


class _Move:
    def __init__(self, dest: str) -> None:
        self.dest = dest
        self.future: Log | None = None
        self.task: asyncio.Task | None = None
        self.cancelled = False


class ReplicaAlterLogDirsManager:
    """See the module docstring. ``replica_manager`` / ``log_manager``: the broker's."""

    def __init__(self, replica_manager, log_manager) -> None:
        self.rm = replica_manager
        self.lm = log_manager
        self.moves: dict[tuple[str, int], _Move] = {}
        self.completed = 0

    def future(self, tp) -> tuple[str, Log] | None:
        m = self.moves.get(tuple(tp))
        return (m.dest, m.future) if m is not None and m.future is not None else None

    def alter(self, dest: str, tps) -> dict[tuple[str, int], ErrorCode]:
        """Start moving each partition to ``dest`` (an absolute path): NONE,
        LOG_DIR_NOT_FOUND (not one of log.dirs), REPLICA_NOT_AVAILABLE (not hosted here),
        KAFKA_STORAGE_ERROR (the directory cannot be used)."""
        dest = os.path.abspath(dest)
        dirs = {os.path.abspath(d): d for d in self.lm.log_dirs}
        out = {}
        for tp in tps:
            tp = (tp[0], int(tp[1]))
            if dest not in dirs:
                out[tp] = ErrorCode.LOG_DIR_NOT_FOUND
                continue
            if self.lm.failure_channel.is_offline(dest):
                out[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            part = self.rm.get_partition(*tp)
            if part is None or part.log is None:
                out[tp] = ErrorCode.REPLICA_NOT_AVAILABLE
                continue
            current = os.path.abspath(self.lm.log_dir_of(tp) or "")
            running = self.moves.get(tp)
            if running is not None and running.dest == dirs[dest]:
                out[tp] = ErrorCode.NONE
                continue
            if running is not None:
                self._cancel(tp)
            if current != dest:
                move = self.moves[tp] = _Move(dirs[dest])
                move.task = asyncio.get_running_loop().create_task(
                    self._run(tp, move), name=f"alter-log-dir-{tp[0]}-{tp[1]}")
            out[tp] = ErrorCode.NONE
        return out

    def _cancel(self, tp) -> None:
        move = self.moves.pop(tp, None)
        if move is not None:
            move.cancelled = True
            if move.task is not None:
                move.task.cancel()

    async def shutdown(self) -> None:
        for tp in list(self.moves):
            self._cancel(tp)

    async def _run(self, tp, move: _Move) -> None:
        loop = asyncio.get_running_loop()
        future = None
        try:
            part = self.rm.get_partition(*tp)
            old = part.log
            path = os.path.join(move.dest, f"{tp[0]}-{tp[1]}.{uuid.uuid4().hex}-future")
            future = await loop.run_in_executor(None, lambda: Log(
                path, old.config, clean_shutdown=True, time_ms=self.lm.time_ms))
            future.log_start_offset = old.log_start_offset
            move.future = future
            log.info("Started moving %s-%d to %s", tp[0], tp[1], move.dest)
            # copy until a round reads less than a full chunk: the tail appended meanwhile
            # is copied at the switch (bounded by what arrives during the reopen)
            while not move.cancelled and await self._copy_some(loop, old, future):
                pass
            if move.cancelled:
                return
            await loop.run_in_executor(None, future.flush)
            final = os.path.join(move.dest, f"{tp[0]}-{tp[1]}")
            start, leo = future.log_start_offset, future.log_end_offset

            def reopen() -> Log:
                future.close()
                os.rename(path, final)
                fsync_dir(move.dest)
                return Log(final, old.config, recovery_point=leo, log_start_offset=start,
                           clean_shutdown=True, time_ms=self.lm.time_ms,
                           on_roll=self.lm._on_roll, on_flush_needed=self.lm._on_roll)

            new = await loop.run_in_executor(None, reopen)
            future = None
            if move.cancelled or part is not self.rm.get_partition(*tp) or part.log is not old:
                log.info("Move of %s-%d abandoned (the partition changed)", tp[0], tp[1])
                await loop.run_in_executor(None, new.close)
                return
            # the switch: no await from here on
            chunk = min(16 << 20, old.config.segment_bytes)
            while new.log_end_offset < old.log_end_offset:
                info = old.read(new.log_end_offset, chunk, max_offset=old.log_end_offset)
                data = complete_batches(info.records.read_bytes())
                if not data:
                    raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "no batch to copy")
                new.append_as_follower(data)
            new.high_watermark = old.high_watermark
            new.log_start_offset = max(new.log_start_offset, old.log_start_offset)
            self.lm.replace_log(tp, new, move.dest)
            part.log = new
            self.completed += 1
            log.info("Moved %s-%d to %s (log end offset %d)", tp[0], tp[1], move.dest,
                     new.log_end_offset)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("moving %s-%d to %s failed", tp[0], tp[1], move.dest)
        finally:
            if self.moves.get(tp) is move:
                del self.moves[tp]
            if future is not None:
                try:
                    await loop.run_in_executor(None, future.close)
                except Exception:  # noqa: BLE001 - best effort cleanup
                    pass
                import shutil
                await loop.run_in_executor(None, shutil.rmtree, future.dir, True)

    @staticmethod
    async def _copy_some(loop, old: Log, future: Log) -> bool:
        """Copy up to a chunk; True when a full chunk was copied (more may follow)."""
        start = future.log_end_offset
        if start >= old.log_end_offset:
            return False
        if start < old.log_start_offset:  # retention moved past us
            start = old.log_start_offset
            future.log_start_offset = start
        chunk = min(COPY_CHUNK_BYTES, old.config.segment_bytes)  # one append fits a segment
        info = old.read(start, chunk, max_offset=old.log_end_offset)
        data = await loop.run_in_executor(None, info.records.read_bytes)
        full = len(data) >= chunk
        data = complete_batches(data)
        if data:
            await loop.run_in_executor(None, future.append_as_follower, data)
        return full
