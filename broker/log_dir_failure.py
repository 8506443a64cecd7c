"""What the broker does when a log dir fails (Kafka's ReplicaManager.handleLogDirFailure,
KIP-112), and the produce results of failed flushes.

`LogDirFailureHandler.on_offline_dir(dir)` runs on the event loop, once per dir the
`storage.log_dir_failure.LogDirFailureChannel` reports:

1. the replica fetchers of the dir's partitions stop, and log dir moves (AlterReplicaLogDirs)
   from or to the dir are abandoned;
2. the partitions become offline: `ReplicaManager.offline_partitions`; Produce, Fetch,
   ListOffsets, DeleteRecords, ... on them answer KAFKA_STORAGE_ERROR (56), LeaderAndIsr
   and StopReplica too (so the controller learns which replicas are offline), and parked
   produces/fetches on them complete;
3. the LogManager forgets the dir's logs (no checkpoints, flushes, retention there);
4. the controller is told (`Controller.propagate_log_dir_event`: ZooKeeper mode writes
   `/log_dir_event_notification/log_dir_event_<seq>`; the controller sends LeaderAndIsr for
   every replica of this broker, learns the offline ones from the KAFKA_STORAGE_ERROR answers
   and elects other leaders for the partitions this broker led).

With every dir offline the broker cannot serve anything: one CRITICAL line names the dirs
and `on_all_offline()` stops the broker (exit status 1; Kafka halts). Lines logged per failed
dir: the channel's ERROR and two WARNINGs here (plus the LogManager's one), whatever the
number of partitions or of failing requests.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from broker.purgatory.delayed_produce import ProducePartitionResult
from protocol.errors import ErrorCode, KafkaError

__all__ = ["LogDirFailureHandler", "after_flushes", "flush_failure"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class LogDirFailureHandler:
    """`notify_controller()` announces a failure to the controller (awaited in a task);
    `on_all_offline()` is called when no dir is left."""

    def __init__(self, replica_manager: Any, log_manager: Any,
                 notify_controller: Callable[[], Awaitable[object]] | None = None,
                 on_all_offline: Callable[[], object] | None = None,
                 log_dir_mover: Any = None) -> None:
        self.rm = replica_manager
        self.mover = log_dir_mover
        self.log_manager = log_manager
        self.notify_controller = notify_controller
        self.on_all_offline = on_all_offline
        self.handled: set[str] = set()
        self.stopping = False
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        """Take failures from the LogManager's channel (those already reported included)."""
        self.log_manager.failure_channel.attach(asyncio.get_running_loop(), self.on_offline_dir)

    def on_offline_dir(self, log_dir: str) -> None:
        if self.stopping or log_dir in self.handled:
            return
        self.handled.add(log_dir)
        log.warning("Stopping serving replicas in dir %s because the log directory has failed.",
                    log_dir)
        rm, lm = self.rm, self.log_manager
        tps = [tp for tp in list(rm.partitions) if lm.log_dir_of(tp) == log_dir]
        if rm.fetcher_manager is not None:
            rm.fetcher_manager.remove_fetcher_for_partitions(tps)
        if self.mover is not None:
            for tp, move in list(self.mover.moves.items()):
                if tp in tps or os.path.abspath(move.dest) == log_dir:
                    self.mover._cancel(tp)
        for tp in tps:
            part = rm.partitions.pop(tp, None)
            if part is not None:
                part.deleted = True  # parked fetches holding it complete
                rm.partitions_changed()
            rm.offline_partitions.add(tp)
        lm.handle_log_dir_failure(log_dir)
        for tp in tps:
            rm._wake(tp)
        if not lm.live_log_dirs:
            log.critical("Shutdown broker because all log dirs in %s have failed",
                         ", ".join(lm.log_dirs))
            self.stopping = True
            if self.on_all_offline is not None:
                self.on_all_offline()
            return
        if self.notify_controller is not None:
            task = asyncio.ensure_future(self._notify(log_dir))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        log.warning("Stopped serving replicas in dir %s (%d partitions offline)", log_dir,
                    len(tps))

    async def _notify(self, log_dir: str) -> None:
        try:
            await self.notify_controller()
        except Exception:  # noqa: BLE001 - the broker keeps serving its other dirs
            log.exception("could not tell the controller that log dir %s failed", log_dir)

    async def shutdown(self) -> None:
        self.stopping = True
        for t in list(self._tasks):
            t.cancel()


# --- produce results of failed flushes (flush.messages reached in an append) ------------------

def flush_failure(tp: TopicPartition, f: asyncio.Future) -> ProducePartitionResult | None:
    """A KAFKA_STORAGE_ERROR result if the flush future `f` of `tp` failed, else None. The
    LogManager marked the dir offline (and logged it once); anything else is logged here."""
    if not f.cancelled() and f.exception() is None:
        return None
    exc = "cancelled" if f.cancelled() else f.exception()
    if not (isinstance(exc, KafkaError) and exc.code == ErrorCode.KAFKA_STORAGE_ERROR):
        log.error("fsync of %s-%d failed: %s", tp[0], tp[1], exc)
    return ProducePartitionResult(ErrorCode.KAFKA_STORAGE_ERROR,
                                  error_message=f"fsync of {tp[0]}-{tp[1]} failed: {exc}")


def after_flushes(flushes: dict, out) -> asyncio.Future:
    """A Future of `out` (the results dict, or a DelayedProduce's Future of it) done once
    every flush future in `flushes` (tp -> awaitable) is done; a failed one replaces its
    partition's result with KAFKA_STORAGE_ERROR."""
    fut: asyncio.Future = asyncio.get_running_loop().create_future()
    failed: dict[TopicPartition, ProducePartitionResult] = {}
    waiting = [len(flushes) + isinstance(out, asyncio.Future)]

    def finish() -> None:
        if fut.done():
            return
        res = out
        if isinstance(out, asyncio.Future):
            if out.cancelled():
                fut.cancel()
                return
            if out.exception() is not None:
                fut.set_exception(out.exception())
                return
            res = out.result()
        fut.set_result({**res, **failed} if failed else res)

    def one_done(tp: TopicPartition | None, f: asyncio.Future) -> None:
        if tp is not None:
            r = flush_failure(tp, f)
            if r is not None:
                failed[tp] = r
        waiting[0] -= 1
        if waiting[0] == 0:
            finish()

    for tp, f in flushes.items():
        asyncio.ensure_future(f).add_done_callback(functools.partial(one_done, tp))
    if isinstance(out, asyncio.Future):
        out.add_done_callback(functools.partial(one_done, None))
    return fut
