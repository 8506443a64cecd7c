"""PartitionLoading: which ``__consumer_offsets`` partitions the coordinator owns, and
loading them (Kafka's GroupCoordinator ``onElection`` / ``onResignation`` with
GroupMetadataManager's ``scheduleLoadGroupAndOffsets`` / ``removeGroupsForPartition``), a
mixin of ``GroupCoordinator``.

- ``on_election(partition, epoch)``: this broker leads ``__consumer_offsets-<partition>``
  (``epoch`` = the leader epoch, Kafka's coordinator epoch): the partition is "loading"
  (requests for its groups answer COORDINATOR_LOAD_IN_PROGRESS) while its records are
  replayed (``store.load``), then "owned". A load that raises is retried after
  ``LOAD_RETRY_BACKOFF_MS``, doubling up to ``LOAD_RETRY_MAX_BACKOFF_MS`` (Josef's addition:
  Kafka logs the failure and leaves the partition unloaded until the next election), for as
  long as this broker still leads the partition in that epoch; every failure is logged with
  the partition, attempt and next delay. An election with a newer epoch during a load
  restarts it under that epoch when it finishes.
- ``on_resignation(partition)``: no longer leader: a load or retry in progress is abandoned,
  the partition's groups are dropped (Dead) and their parked JoinGroup/SyncGroup requests
  answer NOT_COORDINATOR.
- ``coordinator_error(group_id)``: Kafka's validateGroupStatus (COORDINATOR_NOT_AVAILABLE
  before startup / after shutdown, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, NONE).

Uses the coordinator's ``store``, ``timer``, ``groups``, ``owned``, ``loading``, ``epochs``,
``active``, ``time_ms``, the purgatories and ``_spawn``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from coordinator.group.group import GroupMetadata, GroupState, JoinResult, SyncResult
from coordinator.group.records import GROUP_METADATA_TOPIC
from coordinator.keys import GroupKey, MemberKey
from coordinator.runtime import Deadline
from protocol.errors import ErrorCode

__all__ = ["LOAD_RETRY_BACKOFF_MS", "LOAD_RETRY_MAX_BACKOFF_MS", "PartitionLoading"]

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState
#: first delay before loading a partition again after a failed load (ms); doubles per failure
LOAD_RETRY_BACKOFF_MS = 1000
#: the longest delay between two load attempts (ms)
LOAD_RETRY_MAX_BACKOFF_MS = 30000


class _LoadRetry(Deadline):
    """A load attempt scheduled on the timer after a failed one."""

    __slots__ = ("partition", "epoch", "attempt")

    def __init__(self, partition: int, epoch: int, attempt: int) -> None:
        super().__init__()
        self.partition = partition
        self.epoch = epoch
        self.attempt = attempt


class PartitionLoading:
    """Ownership and loading of ``__consumer_offsets`` partitions (see the module docstring)."""

    def _is_loading(self, partition: int, epoch: int) -> bool:
        return self.active and partition in self.loading and self.epochs.get(partition) == epoch

    def on_election(self, partition: int, epoch: int = 0) -> asyncio.Task | None:
        """This broker leads ``__consumer_offsets-<partition>``: load its groups. Returns
        the load task (None when already owned or loading)."""
        if partition in self.owned and self.epochs.get(partition) == epoch:
            return None
        if partition in self.loading:
            self.epochs[partition] = epoch  # the running load restarts under it
            return None
        self.epochs[partition] = epoch
        self.loading.add(partition)
        return self._spawn(self._load(partition, epoch))

    async def _load(self, partition: int, epoch: int, attempt: int = 1) -> None:
        start = time.monotonic()
        try:
            loaded = await self.store.load(partition,
                                           lambda: self._is_loading(partition, epoch))
        except Exception as e:
            if not self._is_loading(partition, epoch):
                log.info("Load of %s-%d abandoned (no longer leader in epoch %d): %r",
                         GROUP_METADATA_TOPIC, partition, epoch, e)
                return self._maybe_restart_load(partition)
            delay = min(LOAD_RETRY_BACKOFF_MS << min(attempt - 1, 20), LOAD_RETRY_MAX_BACKOFF_MS)
            log.error("Loading %s-%d (epoch %d, attempt %d) failed: %r; its groups answer "
                      "COORDINATOR_LOAD_IN_PROGRESS, retrying in %d ms", GROUP_METADATA_TOPIC,
                      partition, epoch, attempt, e, delay, exc_info=attempt == 1)
            task = _LoadRetry(partition, epoch, attempt + 1)
            self._load_retries[partition] = task
            task.schedule(self.timer, delay, lambda: self._retry_load(task))
            return
        if not self._is_loading(partition, epoch):
            return self._maybe_restart_load(partition)
        for group_id, group in loaded.items():
            if self.partition_for(group_id) != partition:
                continue
            group._now_ms = self.time_ms
            if getattr(group, "is_share_group", False):  # KIP-932 share group
                if self.share is not None:
                    self.share.on_group_loaded(group)
                continue
            if getattr(group, "is_consumer_group", False):  # KIP-848 group
                if self.consumer is not None:
                    self.consumer_groups[group_id] = group
                    self.consumer.on_group_loaded(group)
                continue
            self.groups[group_id] = group
            self._on_group_loaded(group)
        self.loading.discard(partition)
        self.owned.add(partition)
        log.log(logging.INFO if loaded or attempt > 1 else logging.DEBUG,
                "Loaded %d groups of %s-%d in %.1f ms (attempt %d)", len(loaded),
                GROUP_METADATA_TOPIC, partition, (time.monotonic() - start) * 1000, attempt)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        """Kafka's onGroupLoaded: a group over ``group.max.size`` rebalances (members beyond
        the limit are refused when they rejoin); every member's session timeout starts."""
        if group.size > self.config.max_size and group.can_rebalance():
            self._prepare_rebalance(
                group, f"freshly-loaded group is over capacity ({self.config.max_size}); "
                       "rebalancing to give consumers a chance to commit offsets")
        for member in group.members.values():
            self._complete_and_schedule_heartbeat(group, member)

    def _maybe_restart_load(self, partition: int) -> None:
        """A load finished for an old epoch while the partition is still loading under a
        newer one (re-elected meanwhile): load again for the current epoch."""
        epoch = self.epochs.get(partition)
        if self.active and partition in self.loading and epoch is not None and \
                partition not in self._load_retries:
            self._spawn(self._load(partition, epoch))

    def _retry_load(self, task: _LoadRetry) -> None:
        if self._load_retries.get(task.partition) is task:
            del self._load_retries[task.partition]
        if self._is_loading(task.partition, task.epoch):
            self._spawn(self._load(task.partition, task.epoch, task.attempt))

    def _cancel_load_retry(self, partition: int) -> None:
        task = self._load_retries.pop(partition, None)
        if task is not None:
            task.cancel()

    def owned_partitions(self) -> set[int]:
        """The ``__consumer_offsets`` partitions loaded or loading here."""
        return self.owned | self.loading

    def on_resignation(self, partition: int) -> None:
        """No longer leader: drop the partition's groups; waiters answer NOT_COORDINATOR."""
        self.loading.discard(partition)
        self._cancel_load_retry(partition)
        self.epochs.pop(partition, None)
        was_owned = partition in self.owned
        self.owned.discard(partition)
        if not was_owned:
            return
        if self.share is not None:
            self.share.on_partition_unloaded(partition)
        for group_id in [g for g in self.consumer_groups if self.partition_for(g) == partition]:
            cg = self.consumer_groups.pop(group_id)
            cg.dead = True
            if self.consumer is not None:
                self.consumer.on_group_unloaded(cg)
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups.pop(group_id)
            self._fail_waiters(group, E.NOT_COORDINATOR)
            group.state = S.DEAD
            group.clear_pending_sync_members()
            self.sync_purgatory.check_and_complete(GroupKey(group_id))
            self.join_purgatory.check_and_complete(GroupKey(group_id))
            for mid in list(group.members):
                self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, mid))

    def _fail_waiters(self, group: GroupMetadata, error: ErrorCode) -> None:
        for m in list(group.members.values()):
            group.invoke_join_callback(m, JoinResult(int(error), m.member_id))
            group.invoke_sync_callback(m, SyncResult(int(error)))

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE, or why this broker cannot serve ``group_id`` (Kafka's validateGroupStatus)."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE
        p = self.partition_for(group_id)
        if p in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return E.NOT_COORDINATOR
        return E.NONE
