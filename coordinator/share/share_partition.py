"""The share-partition state machine for one (share group, topic-partition) (KIP-932; Kafka's SharePartition).

Offsets below the share-partition start offset (SPSO, `start_offset`) are done. Offsets in
[SPSO, SPEO) are in flight, each in a `RecordState` (see `coordinator.share.state`); SPEO
(`end_offset`, exclusive here) is the first offset never fetched into the in-flight set.

    Available --acquire--> Acquired --ACCEPT-------------------------> Acknowledged
        ^                     |-------REJECT / GAP / past limit-----> Archived (+ dead letter)
        |                     '--RELEASE / lock expiry / member gone--> Available, or
        '----backoff elapsed---------------------------------------- Delayed (backoff on)

- Acquisition (`acquire`, KIP-932 "Fetching records"): re-acquires Available records of the
  fetched range and takes new ones past SPEO, delivery count + 1, each acquire under one
  acquisition lock of `record_lock_duration_ms` on the timing wheel. New records are taken
  only while SPEO < SPSO + `max_record_locks` (hard cap); `max_records` is a soft cap that
  rounds up to the end of a fetched batch, as Kafka's.
- Acknowledgement (`acknowledge`, KIP-932 "Acknowledging records"): all or nothing per call,
  rules and error codes in `coordinator.share.acknowledgement`. The change is persisted
  before the call returns NONE; a persister error rolls it back and comes back mapped by
  `persister.client_error`.
- Lock expiry and member departure release like RELEASE, without waiting for the persister
  (as Kafka); their write is retried until it lands, carrying any dead-letter intents.
- Delivery-count limit: a record released with delivery_count >= limit is Archived (and
  dead-lettered when a DLQ topic is set).
- Josef's redelivery backoff: a released or expired record is Delayed for
  `config.redelivery_delay_ms(delivery_count)`, one wheel entry per release, then Available.

Writes to the persister are serialized per share-partition (one at a time, FIFO), so the SPSO
and dead-letter sequences in each write are consistent. Everything runs on one event loop;
`acquire` is synchronous, the rest are coroutines. A FENCED_LEADER_EPOCH or
FENCED_STATE_EPOCH from the persister fences the partition: every later call answers
NOT_LEADER_OR_FOLLOWER / FENCED_STATE_EPOCH until the broker loads it afresh.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from coordinator.share.acknowledgement import (
    Plan,
    plan_acknowledge,
    plan_release_member,
    release_target,
)
from coordinator.share.acquisition import acquire_records
from coordinator.share.config import SharePartitionConfig
from coordinator.share.in_flight import InFlightBatch, InFlightCache, InFlightState, RangeTimeout
from coordinator.share.persister import Persister, WriteStateRequest, client_error
from coordinator.share.state import (
    AbortedTransaction,
    AcknowledgementBatch,
    AcquiredRecords,
    DeadLetterIntent,
    FetchedBatch,
    RecordState,
    StateBatch,
)
from coordinator.share.state_batches import overlay
from coordinator.share.timer import ShareTimer
from protocol.errors import ErrorCode

__all__ = ["SharePartition", "SharePartitionListener", "SharePartitionStats"]

log = logging.getLogger(__name__)

#: Delay before re-sending lock-expiry / dead-letter writes that the persister refused (ms).
WRITE_RETRY_BACKOFF_MS = 1000

_AVAILABLE = RecordState.AVAILABLE
_ACQUIRED = RecordState.ACQUIRED
_ARCHIVED = RecordState.ARCHIVED
_DELAYED = RecordState.DELAYED


class SharePartitionListener(Protocol):
    """Callbacks to the broker (phase B wires them to the purgatory and the DLQ writer)."""

    def on_records_available(self, partition: SharePartition) -> None:
        """Records became Available (release, expiry, backoff): try pending ShareFetches."""

    def on_dead_letters(self, partition: SharePartition, intents: list[DeadLetterIntent]) -> None:
        """These intents are durable; write their dead letters, then `complete_dead_letters`."""


@dataclass(frozen=True, slots=True)
class SharePartitionStats:
    """Counts for describe/console/metrics (records, not batches)."""

    start_offset: int
    end_offset: int
    in_flight: int
    available: int
    acquired: int
    delayed: int
    pending_dead_letters: int


class SharePartition:
    """State machine of one share-partition; see the module docstring for the rules."""

    def __init__(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        *,
        config: SharePartitionConfig,
        timer: ShareTimer,
        persister: Persister,
        leader_epoch: int = 0,
        state_epoch: int = 0,
        start_offset: int = 0,
        listener: SharePartitionListener | None = None,
    ) -> None:
        self.group_id = group_id
        self.topic_id = topic_id
        self.partition = partition
        self.config = config
        self.leader_epoch = leader_epoch
        self.state_epoch = state_epoch
        self.cache = InFlightCache()
        self._timer = timer
        self._persister = persister
        self._listener = listener
        self._start = start_offset
        self._end = start_offset
        self._find_next = False
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._flush_scheduled = False
        self._retry_scheduled = False
        # Lock-expiry / departure results applied in memory but not yet persisted (oldest
        # first): state batches, and dead-letter intents without their sequence yet.
        self._unpersisted: list[StateBatch] = []
        self._unpersisted_dl: list[tuple[int, int, int]] = []
        self._dead_letters: dict[int, DeadLetterIntent] = {}
        self._next_dl_sequence = 0
        self.dead_letter_producer: tuple[int, int] | None = None
        self._fenced: ErrorCode | None = None

    # ---------------------------------------------------------------- offsets and queries
    @property
    def start_offset(self) -> int:
        """SPSO: every offset below it is acknowledged or archived."""
        return self._start

    @property
    def end_offset(self) -> int:
        """SPEO (exclusive): the first offset not yet fetched into the in-flight set."""
        return self._end

    @property
    def fenced(self) -> ErrorCode | None:
        """The error every call answers once fenced, else None."""
        return self._fenced

    def next_fetch_offset(self) -> int:
        """Where the next log read should start: the first Available offset, else SPEO.

        Offsets in [SPSO, SPEO) that no cached batch covers (after a load: records that were
        in flight when the old leader died) count as Available.
        """
        if not self._find_next:
            return self._end
        pos = self._scan(lambda st: st.state is _AVAILABLE and not st.pending)
        if pos < self._end:
            return pos
        self._find_next = False
        return self._end

    def can_acquire(self) -> bool:
        """True when a fetch could acquire something (Available records, or lock room)."""
        if self._fenced is not None:
            return False
        return (self.next_fetch_offset() < self._end
                or self._end - self._start < self.config.max_record_locks)

    def stats(self) -> SharePartitionStats:
        available = acquired = delayed = 0
        for batch in self.cache:
            for lo, hi, st in batch.all_states():
                lo = max(lo, self._start)
                n = hi - lo + 1
                if n <= 0:
                    continue
                if st.state is _AVAILABLE:
                    available += n
                elif st.state is _ACQUIRED:
                    acquired += n
                elif st.state is _DELAYED:
                    delayed += n
        return SharePartitionStats(self._start, self._end, self._end - self._start, available,
                                   acquired, delayed, len(self._dead_letters))

    def idle(self) -> bool:
        """Nothing acquired, no dead letter pending, no write queued or running: the state
        in memory equals the persisted one, so the partition may be dropped and reloaded."""
        if self._tasks or self._write_lock.locked() or self._dead_letters \
                or self._unpersisted or self._unpersisted_dl:
            return False
        return not any(st.state is _ACQUIRED or st.pending
                       for batch in self.cache for _lo, _hi, st in batch.all_states())

    def pending_dead_letters(self) -> list[DeadLetterIntent]:
        """Durable intents whose dead letter is not confirmed yet, in sequence order."""
        return [self._dead_letters[s] for s in sorted(self._dead_letters)]

    # ---------------------------------------------------------------- acquisition
    def acquire(
        self,
        member_id: str,
        batches: Sequence[FetchedBatch],
        max_records: int,
        *,
        batch_size: int | None = None,
        last_stable_offset: int | None = None,
        aborted_transactions: Iterable[AbortedTransaction] = (),
    ) -> list[AcquiredRecords]:
        """Acquire records of the fetched `batches` for `member_id` (ShareFetch).

        `batches` are the fetched RecordBatch headers in offset order, read from
        `next_fetch_offset()`; under read_committed the caller reads up to the LSO and passes
        it with the aborted transactions. Returns the `AcquiredRecords` to answer with (empty
        when fenced or nothing is available). Not persisted: acquisition is in memory only.
        """
        if self._fenced is not None or max_records <= 0 or not batches:
            return []
        if self.config.read_committed and last_stable_offset is not None:
            batches = [b for b in batches if b.base_offset < last_stable_offset]
            if not batches:
                return []
        lock = RangeTimeout(batches[0].base_offset, batches[-1].last_offset)
        result = acquire_records(self, member_id, batches, max_records, batch_size,
                                 last_stable_offset, aborted_transactions, lock)
        if lock.holders > 0:
            lock.handle = self._timer.schedule(self.config.record_lock_duration_ms,
                                               lambda: self._on_lock_timeout(lock))
        self._advance_start()
        return result

    # ---------------------------------------------------------------- acknowledgement
    async def acknowledge(self, member_id: str, batches: Sequence[AcknowledgementBatch]) -> ErrorCode:
        """Apply ShareFetch/ShareAcknowledge acknowledgements; NONE once persisted."""
        return await self._write(lambda: plan_acknowledge(self, member_id, batches))

    async def release_acquired_records(self, member_id: str) -> ErrorCode:
        """Release everything `member_id` holds (share session closed, member left)."""
        return await self._write(lambda: plan_release_member(self, member_id))

    async def complete_dead_letters(self, sequences: Iterable[int]) -> ErrorCode:
        """Record that these intents' dead letters are durably in the DLQ topic."""
        done = tuple(s for s in sequences if s in self._dead_letters)
        if not done:
            return ErrorCode.NONE
        return await self._write(None, done=done)

    async def set_dead_letter_producer(self, producer_id: int, producer_epoch: int) -> ErrorCode:
        """Persist the idempotent producer the DLQ writer uses (see dead_letter)."""
        return await self._write(None, producer=(producer_id, producer_epoch))

    async def persist_start_offset(self) -> ErrorCode:
        """Write the current SPSO even if nothing else changed (after choosing it on load)."""
        return await self._write(None, force=True)

    async def drain(self) -> None:
        """Wait for background writes (lock expiry, retries) scheduled so far."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def update_log_start_offset(self, log_start_offset: int) -> None:
        """Retention/DeleteRecords moved the log start past the SPSO: archive what is gone.

        Available and Delayed records below it are archived (no dead letter: the record no
        longer exists); Acquired ones are archived when released or when their lock expires.
        """
        if log_start_offset <= self._start:
            return
        for batch in self.cache.overlapping(self._start, log_start_offset - 1):
            if batch.last_offset >= log_start_offset:
                batch.split()
            for _lo, _hi, st in batch.states(self._start, log_start_offset - 1):
                if st.state in (_AVAILABLE, _DELAYED) and not st.pending:
                    st.drop_backoff()
                    st.state = _ARCHIVED
        self._start = log_start_offset
        if self._end < log_start_offset:
            self._end = log_start_offset
        self._advance_start()

    def close(self, error: ErrorCode = ErrorCode.NOT_LEADER_OR_FOLLOWER) -> None:
        """Leadership moved (or the group/topic went): stop timers, answer `error` from now on."""
        if self._fenced is None:
            self._fenced = error
        for batch in self.cache.clear():
            for _lo, _hi, st in batch.all_states():
                st.drop_lock()
                st.drop_backoff()

    # ---------------------------------------------------------------- writes
    async def _write(self, build, *, done: tuple[int, ...] = (),
                     producer: tuple[int, int] | None = None, force: bool = False) -> ErrorCode:
        async with self._write_lock:
            if self._fenced is not None:
                return self._fenced
            plan = build() if build is not None else Plan()
            if isinstance(plan, ErrorCode):
                return plan
            carried, self._unpersisted = self._unpersisted, []
            carried_dl, self._unpersisted_dl = self._unpersisted_dl, []
            if not (plan.changes or carried or carried_dl or done or producer or force):
                return ErrorCode.NONE
            batches = list(carried)
            new_dl = list(carried_dl)
            for c in plan.changes:
                batches.append(StateBatch(c.first, c.last, c.new_state.persisted,
                                          c.state.delivery_count))
                if c.reason is not None:
                    new_dl.extend((off, c.state.delivery_count, c.reason)
                                  for off in range(c.first, c.last + 1))
            seq0 = self._next_dl_sequence
            intents = tuple(DeadLetterIntent(seq0 + i, off, dc, reason)
                            for i, (off, dc, reason) in enumerate(new_dl))
            self._next_dl_sequence = seq0 + len(intents)
            start = self._simulated_start(plan)
            request = WriteStateRequest(
                self.group_id, self.topic_id, self.partition, self.state_epoch,
                self.leader_epoch, start, tuple(overlay((), batches, start)), intents, done,
                producer,
            )
            code = await self._persist(request)
            if code == ErrorCode.NONE:
                if producer is not None:
                    self.dead_letter_producer = producer
                for s in done:
                    self._dead_letters.pop(s, None)
                self._commit(plan, start)
                self._add_dead_letters(intents)
                return ErrorCode.NONE
            self._next_dl_sequence = seq0
            self._unpersisted = carried + self._unpersisted
            self._unpersisted_dl = carried_dl + self._unpersisted_dl
            self._rollback(plan)
            if (self._unpersisted or self._unpersisted_dl) and self._fenced is None \
                    and not self._retry_scheduled:
                self._retry_scheduled = True
                self._timer.schedule(WRITE_RETRY_BACKOFF_MS, self._retry_flush)
            return self._fenced if self._fenced is not None else client_error(code)

    async def _persist(self, request: WriteStateRequest) -> int:
        try:
            code = await self._persister.write_state(request)
        except Exception:
            log.exception("share state write failed for %s", self._name())
            return ErrorCode.UNKNOWN_SERVER_ERROR
        if code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH):
            log.info("share-partition %s fenced by the share coordinator (%s)", self._name(),
                     ErrorCode(code).name)
            self.close(client_error(code))
        return code

    def _simulated_start(self, plan: Plan) -> int:
        """The SPSO once `plan` is applied (nothing changes)."""
        return self._first_open_offset({id(c.state): c.new_state for c in plan.changes})

    def _commit(self, plan: Plan, start: int) -> None:
        """Apply a persisted plan; `start` is the SPSO the write carried.

        Offsets below `start` were terminal or planned terminal when the write was built, and
        terminal states are final, so the SPSO scan may begin there.
        """
        delayed: list[tuple[int, int, InFlightState]] = []
        available = False
        for c in plan.changes:
            st = c.state
            st.pending = False
            st.expired = False
            st.state = c.new_state
            st.member_id = None
            st.drop_lock()
            if c.new_state is _DELAYED:
                delayed.append((c.first, c.last, st))
            elif c.new_state is _AVAILABLE:
                available = True
        self._start_backoff(delayed)
        self._start = max(self._start, min(start, self._end))
        self._advance_start()
        if available:
            self._find_next = True
            self._notify_available()

    def _rollback(self, plan: Plan) -> None:
        expired = []
        for c in plan.changes:
            c.state.pending = False
            if c.state.expired:
                c.state.expired = False
                expired.append(c)
        if expired and self._fenced is None:
            for c in expired:
                self._expire(c.state, c.first, c.last)
            self._after_release()

    def _add_dead_letters(self, intents: Sequence[DeadLetterIntent]) -> None:
        if not intents:
            return
        for i in intents:
            self._dead_letters[i.sequence] = i
        if self._listener is not None:
            self._listener.on_dead_letters(self, list(intents))

    def _retry_flush(self) -> None:
        self._retry_scheduled = False
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._flush_scheduled or self._fenced is not None:
            return
        self._flush_scheduled = True

        async def flush() -> None:
            self._flush_scheduled = False
            await self._write(None)

        task = asyncio.get_running_loop().create_task(flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---------------------------------------------------------------- timeouts
    def _on_lock_timeout(self, lock: RangeTimeout) -> None:
        lock.handle = None
        if self._fenced is not None:
            return
        changed = False
        for batch in self.cache.overlapping(lock.first_offset, lock.last_offset):
            for lo, hi, st in batch.states(lock.first_offset, lock.last_offset):
                if st.lock is not lock:
                    continue
                if st.pending:
                    st.expired = True
                    continue
                st.lock = None
                lock.holders -= 1
                if st.state is _ACQUIRED:
                    self._expire(st, lo, hi)
                    changed = True
        if changed:
            self._after_release()

    def _expire(self, st: InFlightState, lo: int, hi: int) -> None:
        """Release an Acquired state without the persister (lock expiry, failed ack)."""
        new_state, reason = release_target(self, st, hi)
        st.drop_lock()
        st.state = new_state
        st.member_id = None
        self._unpersisted.append(StateBatch(lo, hi, new_state.persisted, st.delivery_count))
        if len(self._unpersisted) > 2 * self.config.max_record_locks:
            # The coordinator is unreachable and locks keep expiring: keep the backlog small.
            self._unpersisted = overlay((), self._unpersisted)
        if reason is not None:
            self._unpersisted_dl.extend((off, st.delivery_count, reason) for off in range(lo, hi + 1))
        if new_state is _DELAYED:
            self._start_backoff([(lo, hi, st)])
        elif new_state is _AVAILABLE:
            self._find_next = True

    def _after_release(self) -> None:
        self._advance_start()
        self._schedule_flush()
        if self._find_next:
            self._notify_available()

    def _start_backoff(self, items: list[tuple[int, int, InFlightState]]) -> None:
        """One wheel entry per distinct delay among `items` (all Delayed)."""
        by_delay: dict[int, list[tuple[int, int, InFlightState]]] = {}
        for item in items:
            by_delay.setdefault(self.config.redelivery_delay_ms(item[2].delivery_count), []).append(item)
        for delay, group in by_delay.items():
            rt = RangeTimeout(min(i[0] for i in group), max(i[1] for i in group))
            for _lo, _hi, st in group:
                st.drop_backoff()
                st.backoff = rt
                rt.holders += 1
            rt.handle = self._timer.schedule(delay, lambda rt=rt: self._on_backoff(rt))

    def _on_backoff(self, rt: RangeTimeout) -> None:
        rt.handle = None
        if self._fenced is not None:
            return
        woke = False
        for batch in self.cache.overlapping(rt.first_offset, rt.last_offset):
            for _lo, _hi, st in batch.states(rt.first_offset, rt.last_offset):
                if st.backoff is rt:
                    st.backoff = None
                    rt.holders -= 1
                    if st.state is _DELAYED:
                        st.state = _AVAILABLE
                        woke = True
        if woke:
            self._find_next = True
            self._notify_available()

    # ---------------------------------------------------------------- helpers
    def _advance_start(self) -> None:
        """Move the SPSO past terminal records; drop batches wholly below it."""
        self._start = self._first_open_offset({})
        for batch in self.cache.drop_below(self._start):
            for _lo, _hi, st in batch.all_states():
                st.drop_lock()
                st.drop_backoff()

    def _first_open_offset(self, planned: dict[int, RecordState]) -> int:
        """First offset >= SPSO that is not terminal (uncovered offsets are not), else SPEO.

        `planned` maps id(state) to the state a pending write will give it.
        """
        return self._scan(lambda st: not planned.get(id(st), st.state).terminal)

    def _scan(self, stop) -> int:
        """First offset >= SPSO not covered by a batch or whose state satisfies `stop`,
        else the offset after the last batch (SPSO when the cache is empty)."""
        pos = self._start
        for batch in self.cache:
            if batch.last_offset < pos:
                continue
            if batch.first_offset > pos:
                return pos
            for lo, _hi, st in batch.states(pos, batch.last_offset):
                if stop(st):
                    return max(lo, pos)
            pos = batch.last_offset + 1
        return pos

    def _add_batch(self, first: int, last: int, st: InFlightState) -> InFlightBatch:
        batch = InFlightBatch(first, last, st)
        self.cache.add(batch)
        if last + 1 > self._end:
            self._end = last + 1
        return batch

    def _notify_available(self) -> None:
        if self._listener is not None:
            self._listener.on_records_available(self)

    def _name(self) -> str:
        return f"{self.group_id}:{self.topic_id}:{self.partition}"

    def __repr__(self) -> str:
        return (f"SharePartition({self._name()}, spso={self._start}, speo={self._end}, "
                f"batches={len(self.cache)})")
