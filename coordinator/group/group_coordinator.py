"""GroupCoordinator: Kafka's classic group protocol and offset storage for the groups whose
``__consumer_offsets`` partition this broker leads.

Ownership (``partition_loading.PartitionLoading``, mixed in): ``on_election(partition)``
(this broker became leader of ``__consumer_offsets-<partition>``) loads the partition
(COORDINATOR_LOAD_IN_PROGRESS meanwhile; failed loads are retried with backoff);
``on_resignation(partition)`` unloads its groups (waiters answer NOT_COORDINATOR). A group on
a partition this broker does not own -> NOT_COORDINATOR; before ``startup`` / after
``shutdown`` -> COORDINATOR_NOT_AVAILABLE.

Membership (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, rebalances, DelayedJoin and
DelayedHeartbeat) is ``group_membership.GroupMembership``, mixed in. The group is written to
``__consumer_offsets`` when a generation forms with the leader's assignment, when it becomes
Empty, and when a static member is replaced; offsets on every commit; tombstones on
deletion and expiry (``offsets.retention.minutes``: KIP-211 for Empty groups, counted from
when they became Empty; KIP-496 for Stable consumer groups, the offsets of topics no member
subscribes to, counted from their commit; simple groups from each commit; see
``GroupMetadata.expired_offsets``).

Results reach the caller through callbacks (``JoinResult``, ``SyncResult``, error codes) so
the purgatory operations can answer parked requests; the handlers wrap them in futures.
Everything runs on the event loop thread; group writes are awaited in tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from coordinator.group.group import (
    GroupMetadata,
    GroupState,
    JoinResult,
    OffsetAndMetadata,
    SyncResult,
)
from coordinator.group.group_membership import GroupMembership
from coordinator.group.group_store import SIZE_ERRORS, GroupStore
from coordinator.group.partition_loading import PartitionLoading
from coordinator.group.records import group_tombstone, offset_commit_record, offset_tombstone
from coordinator.runtime import CoordinatorTimer
from protocol.errors import ErrorCode

__all__ = ["GroupConfig", "GroupCoordinator", "JoinResult", "SyncResult"]

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupConfig:
    """The broker settings the coordinator uses (Kafka names; times in ms)."""

    def __init__(self, min_session_timeout_ms: int = 6000,
                 max_session_timeout_ms: int = 1800000, initial_rebalance_delay_ms: int = 3000,
                 max_size: int = 2**31 - 1, offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
                 offsets_retention_check_interval_ms: int = 600000,
                 offset_metadata_max_bytes: int = 4096, num_partitions: int = 50) -> None:
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.max_size = max_size
        self.offsets_retention_ms = offsets_retention_ms
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.num_partitions = num_partitions

    @classmethod
    def from_kafka_config(cls, config) -> GroupConfig:
        return cls(
            min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
            max_size=config.get("group.max.size"),
            offsets_retention_ms=config.get("offsets.retention.minutes") * 60 * 1000,
            offsets_retention_check_interval_ms=config.get("offsets.retention.check.interval.ms"),
            offset_metadata_max_bytes=config.get("offset.metadata.max.bytes"),
            num_partitions=config.get("offsets.topic.num.partitions"))


class GroupCoordinator(PartitionLoading, GroupMembership):
    """See the module docstring. ``store`` is a GroupStore (or anything with its
    ``partition_for``/``append``/``load``), ``timer`` the runtime's CoordinatorTimer (its
    purgatories park the DelayedJoin/DelayedSync/DelayedHeartbeat operations)."""

    def __init__(self, broker_id: int, config: GroupConfig, store: GroupStore,
                 timer: CoordinatorTimer,
                 time_ms: Callable[[], int] = _now_ms) -> None:
        self.broker_id = broker_id
        self.config = config
        self.store = store
        self.timer = timer
        self.time_ms = time_ms
        self.join_purgatory = timer.purgatory("Rebalance")
        self.heartbeat_purgatory = timer.purgatory("Heartbeat")
        self.sync_purgatory = timer.purgatory("Sync")
        self.groups: dict[str, GroupMetadata] = {}
        # KIP-848 groups (coordinator.group.consumer_coordinator sets ``consumer``)
        self.consumer_groups: dict = {}
        self.consumer = None
        # KIP-932 share groups (coordinator.group.share_groups, set by the wiring)
        self.share = None
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.epochs: dict[int, int] = {}
        self._load_retries: dict[int, Any] = {}
        self.active = False
        self.rebalances = 0
        self._tasks: set[asyncio.Task] = set()
        self._expiry_task: asyncio.Task | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def startup(self, run_expiry: bool = True) -> None:
        self.active = True
        if run_expiry:
            self._expiry_task = asyncio.get_running_loop().create_task(self._expiry_loop())

    async def shutdown(self) -> None:
        self.active = False
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry_task
        for p in list(self._load_retries):
            self._cancel_load_retry(p)
        for t in list(self._tasks):
            t.cancel()
        self.join_purgatory.shutdown()
        self.heartbeat_purgatory.shutdown()
        self.sync_purgatory.shutdown()
        if self.consumer is not None:
            self.consumer.shutdown()
        if self.share is not None:
            self.share.shutdown()
        self.consumer_groups.clear()
        self.groups.clear()
        self.owned.clear()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group coordinator task failed", exc_info=task.exception())

    def _spawn_callback(self, coro, callback: Callable[[Any], None], on_error: Any) -> None:
        """Run ``coro`` and hand its result to ``callback`` (``on_error`` if it raised)."""
        def done(task: asyncio.Task) -> None:
            if task.cancelled() or task.exception() is not None:
                callback(on_error)
            else:
                callback(task.result())
        self._spawn(coro).add_done_callback(done)

    async def wait_idle(self) -> None:
        """Wait for in-flight background writes/loads (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- partition ownership -------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return self.store.partition_for(group_id)

    async def append_group_records(self, group_id: str, records: list) -> ErrorCode:
        """Append a consumer or share group's own records (not offsets) to its
        ``__consumer_offsets`` partition: the store's error, a size error answered as
        UNKNOWN_SERVER_ERROR (Kafka's CoordinatorRuntime for group records)."""
        if not records:
            return E.NONE
        err = await self.store.append(self.partition_for(group_id), records)
        return E.UNKNOWN_SERVER_ERROR if err in SIZE_ERRORS else err

    # --- offsets -------------------------------------------------------------------------------
    async def handle_commit_offsets(self, group_id: str, member_id: str,
                                    group_instance_id: str | None, generation_id: int,
                                    offsets: dict[tuple[str, int], OffsetAndMetadata]
                                    ) -> dict[tuple[str, int], ErrorCode]:
        """Per partition: NONE, OFFSET_METADATA_TOO_LARGE, or for all: COORDINATOR_*,
        NOT_COORDINATOR, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS,
        FENCED_INSTANCE_ID, INVALID_COMMIT_OFFSET_SIZE (append too large)."""
        def all_(error: ErrorCode) -> dict:
            return {tp: error for tp in offsets}

        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return all_(err)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            err = self.consumer.validate_offset_commit(consumer_group, member_id,
                                                       group_instance_id, generation_id)
            return all_(err) if err != E.NONE else await self._do_commit(consumer_group, offsets)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return all_(E.ILLEGAL_GENERATION)
            # not using group management: a "simple" group that only stores offsets
            group = GroupMetadata(group_id, S.EMPTY, self.time_ms)
            self.groups[group_id] = group
        err = self._validate_offset_commit(group, member_id, group_instance_id, generation_id)
        if err != E.NONE:
            return all_(err)
        if group.is_state(S.COMPLETING_REBALANCE):
            # a valid member of the new generation: it has not synced yet
            return all_(E.REBALANCE_IN_PROGRESS)
        if not group.is_state(S.EMPTY):
            self._complete_and_schedule_heartbeat(group, group.get(member_id))
        return await self._do_commit(group, offsets)

    @staticmethod
    def _validate_offset_commit(group: GroupMetadata, member_id: str,
                                group_instance_id: str | None, generation_id: int) -> ErrorCode:
        """Kafka's validateOffsetCommit: Dead -> COORDINATOR_NOT_AVAILABLE; generation < 0
        on an Empty group is an admin / simple-consumer commit (allowed); with a generation,
        member id or instance id the member must be current (UNKNOWN_MEMBER_ID,
        FENCED_INSTANCE_ID) and the generation the group's (ILLEGAL_GENERATION); without
        any of them only an Empty group takes the commit (UNKNOWN_MEMBER_ID)."""
        if group.is_state(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_state(S.EMPTY):
            return E.NONE
        if generation_id >= 0 or member_id or group_instance_id is not None:
            err = group.member_error(member_id, group_instance_id)
            if err != E.NONE:
                return err
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
            return E.NONE
        return E.NONE if group.is_state(S.EMPTY) else E.UNKNOWN_MEMBER_ID

    def split_oversized_metadata(self, offsets: dict[tuple[str, int], OffsetAndMetadata]
                                 ) -> tuple[dict[tuple[str, int], ErrorCode],
                                            dict[tuple[str, int], OffsetAndMetadata]]:
        """({tp: OFFSET_METADATA_TOO_LARGE}, the offsets whose metadata fits
        `offset.metadata.max.bytes`)."""
        result: dict[tuple[str, int], ErrorCode] = {}
        valid: dict[tuple[str, int], OffsetAndMetadata] = {}
        limit = self.config.offset_metadata_max_bytes
        for tp, om in offsets.items():
            if om.metadata is not None and len(om.metadata.encode("utf-8")) > limit:
                result[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                valid[tp] = om
        return result, valid

    async def _do_commit(self, group: GroupMetadata,
                         offsets: dict[tuple[str, int], OffsetAndMetadata]
                         ) -> dict[tuple[str, int], ErrorCode]:
        result, valid = self.split_oversized_metadata(offsets)
        if not valid:
            return result
        records = [offset_commit_record(group.group_id, tp[0], tp[1], om)
                   for tp, om in valid.items()]
        group.prepare_offset_commit(valid)
        try:
            err = await self.store.append(self.partition_for(group.group_id), records)
        except BaseException:
            group.finish_offset_commit(None, valid)
            raise
        if err in SIZE_ERRORS:
            err = E.INVALID_COMMIT_OFFSET_SIZE
        group.finish_offset_commit(valid if err == E.NONE else None, valid)
        for tp in valid:
            result[tp] = err
        return result

    def handle_fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                             require_stable: bool = False
                             ) -> tuple[ErrorCode, dict[tuple[str, int],
                                                        tuple[OffsetAndMetadata | None, ErrorCode]]]:
        """(group error, {tp: (committed or None, partition error)}); ``partitions`` None =
        every committed offset. A partition with a commit in flight answers
        UNSTABLE_OFFSET_COMMIT when ``require_stable`` (KIP-447)."""
        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return err, {}
        group = self.groups.get(group_id) or self.consumer_groups.get(group_id)
        if group is None or group.is_state(S.DEAD):
            return E.NONE, {tp: (None, E.NONE) for tp in partitions or ()}
        wanted = list(group.offsets) if partitions is None else partitions
        out = {}
        for tp in wanted:
            if require_stable and group.has_pending_offset_commit(tp):
                out[tp] = (None, E.UNSTABLE_OFFSET_COMMIT)
            else:
                out[tp] = (group.offsets.get(tp), E.NONE)
        return E.NONE, out

    async def handle_delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                                    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (non-consumer group with
        members), per partition GROUP_SUBSCRIBED_TO_TOPIC; tombstones are written."""
        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return err, {}
        group = self.groups.get(group_id)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            group = consumer_group
            subscribed = set()
            for m in group.members.values():
                subscribed |= self.consumer.member_topics(m)
        elif group is None or group.is_state(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, {}
        elif not group.is_state(S.EMPTY) and group.protocol_type != "consumer":
            return E.NON_EMPTY_GROUP, {}
        else:
            subscribed = set() if group.is_state(S.EMPTY) \
                else (group.subscribed_topics() or set())
        result = {}
        deletable = []
        for tp in partitions:
            if tp[0] in subscribed:
                result[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                result[tp] = E.NONE
                if tp in group.offsets:
                    deletable.append(tp)
        if deletable:
            err = await self.store.append(self.partition_for(group_id),
                                          [offset_tombstone(group_id, *tp) for tp in deletable])
            if err != E.NONE:
                return err, {}
            for tp in deletable:
                group.offsets.pop(tp, None)
        return E.NONE, result

    # --- admin ---------------------------------------------------------------------------------
    def handle_describe_group(self, group_id: str) -> tuple[ErrorCode, GroupMetadata | None]:
        """(error, group); an unknown group is (NONE, None): described as Dead."""
        err = self.coordinator_error(group_id)
        if err != E.NONE:
            return err, None
        group = self.groups.get(group_id)
        return E.NONE, group

    def handle_list_groups(self, states: Iterable[str] = ()) -> tuple[ErrorCode,
                                                                      list[GroupMetadata]]:
        """Groups of the partitions this broker owns (COORDINATOR_LOAD_IN_PROGRESS while any
        partition loads); ``states`` filters case-insensitively."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE, []
        wanted = {s.lower() for s in states}
        groups = [g for g in self.groups.values()
                  if not g.is_state(S.DEAD) and (not wanted or g.state.value.lower() in wanted)]
        groups += [g for g in self.consumer_groups.values()
                   if not wanted or g.state.value.lower() in wanted]
        if self.share is not None:
            groups += [g for g in self.share.groups.values()
                       if not wanted or g.state.value.lower() in wanted]
        return (E.COORDINATOR_LOAD_IN_PROGRESS if self.loading else E.NONE), groups

    async def handle_delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """Per group: NONE (Empty -> Dead, offsets and group tombstoned), NON_EMPTY_GROUP,
        GROUP_ID_NOT_FOUND (also for ""), or the coordinator error."""
        out: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            err = self.coordinator_error(group_id)
            if err != E.NONE:
                out[group_id] = err
                continue
            consumer_group = self.consumer_groups.get(group_id)
            if consumer_group is not None:
                out[group_id] = await self.consumer.delete_group(consumer_group)
                continue
            share_group = self.share.groups.get(group_id) if self.share is not None else None
            if share_group is not None:
                out[group_id] = await self.share.delete_group(share_group)
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_state(S.DEAD):
                out[group_id] = E.GROUP_ID_NOT_FOUND
            elif not group.is_state(S.EMPTY):
                out[group_id] = E.NON_EMPTY_GROUP
            else:
                out[group_id] = await self._remove_group(group)
        return out

    async def _remove_group(self, group: GroupMetadata) -> ErrorCode:
        records = [offset_tombstone(group.group_id, *tp) for tp in group.offsets]
        records.append(group_tombstone(group.group_id))
        group.transition_to(S.DEAD)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        group.offsets.clear()
        return await self.store.append(self.partition_for(group.group_id), records)

    # --- offset expiration (KIP-211) -------------------------------------------------------------
    async def expire_offsets(self) -> int:
        """One retention pass (Kafka's cleanupGroupMetadata): tombstone the offsets
        ``GroupMetadata.expired_offsets`` picks (KIP-211 / KIP-496); an Empty group left without offsets, pending members or commits in
        flight becomes Dead and its group record is tombstoned. Returns the number of
        offsets expired."""
        now = self.time_ms()
        total = 0
        for cg in list(self.consumer_groups.values()):
            subscribed = set()
            for m in cg.members.values():
                subscribed |= self.consumer.member_topics(m)
            expired = cg.expired_offsets(now, self.config.offsets_retention_ms, subscribed)
            if expired:
                for tp in expired:
                    cg.offsets.pop(tp, None)
                total += len(expired)
                await self.store.append(self.partition_for(cg.group_id),
                                        [offset_tombstone(cg.group_id, *tp) for tp in expired])
        for group in list(self.groups.values()):
            expired = group.expired_offsets(now, self.config.offsets_retention_ms)
            removable = group.is_state(S.EMPTY) and not group.pending_members and \
                not group.pending_offset_commits and not group.pending_txn_offsets and \
                len(expired) == len(group.offsets)
            if not expired and not removable:
                continue
            records = [offset_tombstone(group.group_id, *tp) for tp in expired]
            for tp in expired:
                group.offsets.pop(tp, None)
            total += len(expired)
            if removable:
                group.transition_to(S.DEAD)
                self.groups.pop(group.group_id, None)
                records.append(group_tombstone(group.group_id))
            await self.store.append(self.partition_for(group.group_id), records)
        if total:
            log.info("Removed %d expired offsets", total)
        return total

    async def _expiry_loop(self) -> None:
        interval = max(self.config.offsets_retention_check_interval_ms, 1) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("offset expiration failed")

    # --- introspection for tools ---------------------------------------------------------------
    def group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def describe_members(self, group: GroupMetadata) -> list[dict[str, Any]]:
        stable = group.is_state(S.STABLE)
        return [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "metadata": m.metadata(group.protocol_name)
            if stable and group.protocol_name is not None else b"",
            "assignment": m.assignment if stable else b"",
        } for m in group.members.values()]
