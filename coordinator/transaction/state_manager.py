"""`TransactionStateManager`: transactional ids in `__transaction_state` (Kafka's
TransactionStateManager, KIP-98).

- `partition_for(txn_id)` = `Utils.abs(javaHashCode(txn_id)) % transaction.state.log.num.
  partitions`; this broker coordinates the ids of the partitions it leads.
- Loading (`load_partition(p, coordinator_epoch)`, on becoming leader; the coordinator epoch
  is the partition's leader epoch): the partition is "loading" (requests answer
  COORDINATOR_LOAD_IN_PROGRESS) while its records are replayed from the log start to the log
  end (last record per id wins, a tombstone removes it); then "owned". A failed load is
  retried with backoff while the partition is still led in that epoch. Transactions found
  in PrepareCommit/PrepareAbort are returned so their markers are sent again.
  `unload_partition(p)` (leadership lost) drops the partition's ids.
- `get_transaction_state(txn_id) -> (error, CoordinatorEpochAndMetadata | None)`: NONE with
  the entry (None if unknown), COORDINATOR_LOAD_IN_PROGRESS, or NOT_COORDINATOR.
- `append_transaction_to_log(txn_id, coordinator_epoch, transit)`: one uncompressed record
  with acks=-1 (`transaction.state.log.min.isr` applies, through the topic's
  min.insync.replicas); on success the transition completes if the coordinator epoch is
  unchanged (else NOT_COORDINATOR); on failure the pending state is dropped (unless
  `retry_on_error(error)`) and the error mapped as Kafka's: UNKNOWN_TOPIC_OR_PARTITION,
  NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT -> COORDINATOR_NOT_AVAILABLE;
  NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR -> NOT_COORDINATOR; MESSAGE_TOO_LARGE,
  RECORD_LIST_TOO_LARGE -> UNKNOWN_SERVER_ERROR.
- `timed_out_transactions(now)`: Ongoing for longer than their timeout (the coordinator
  aborts them); `remove_expired_transactional_ids()`: Empty/Complete* ids idle for
  `transactional.id.expiration.ms` get a tombstone and leave the cache (Dead).
- `list_transaction_states(...)`: ListTransactions' filters.
Event loop only; I/O through the coordinator runtime (`coordinator.runtime`: reads off the
event loop).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable

from coordinator.append_errors import COORDINATOR_APPEND_ERRORS
from coordinator.keys import java_abs, java_string_hashcode
from coordinator.runtime import CoordinatorRuntime
from coordinator.transaction.log_records import (
    TRANSACTION_STATE_TOPIC,
    decode_record,
    key_bytes,
    value_bytes,
)
from coordinator.transaction.metadata import (
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.record_builder import RecordBatchBuilder

__all__ = ["TransactionStateManager", "TxnConfig", "CoordinatorEpochAndMetadata",
           "partition_for"]

log = logging.getLogger(__name__)
E = ErrorCode
S = TransactionState
LOAD_RETRY_BACKOFF_MS = 1000
LOAD_RETRY_MAX_BACKOFF_MS = 30000
_APPEND_ERRORS = {**COORDINATOR_APPEND_ERRORS,
                  E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
                  E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR}


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(transactionalId.hashCode) % partitions` (abs(MIN_VALUE) = 0)."""
    return java_abs(java_string_hashcode(transactional_id)) % num_partitions


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(frozen=True)
class TxnConfig:
    """The coordinator's broker keys (Kafka's TransactionConfig), defaults as Kafka's."""

    transactional_id_expiration_ms: int = 604800000
    max_timeout_ms: int = 900000
    num_partitions: int = 50
    load_buffer_size: int = 5242880
    abort_timed_out_interval_ms: int = 10000
    remove_expired_interval_ms: int = 3600000
    request_timeout_ms: int = 30000

    @classmethod
    def from_kafka_config(cls, config) -> TxnConfig:
        g = config.get
        return cls(g("transactional.id.expiration.ms"), g("transaction.max.timeout.ms"),
                   g("transaction.state.log.num.partitions"),
                   g("transaction.state.log.load.buffer.size"),
                   g("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                   g("transaction.remove.expired.transaction.cleanup.interval.ms"),
                   g("request.timeout.ms"))


@dataclasses.dataclass(frozen=True)
class CoordinatorEpochAndMetadata:
    coordinator_epoch: int
    metadata: TransactionMetadata


@dataclasses.dataclass
class _CacheEntry:
    coordinator_epoch: int
    metadata: dict[str, TransactionMetadata]


class TransactionStateManager:
    """See the module docstring."""

    def __init__(self, broker_id: int, runtime: CoordinatorRuntime, config: TxnConfig,
                 time_ms: Callable[[], int] = _now_ms) -> None:
        self.broker_id = broker_id
        self.runtime = runtime
        self.config = config
        self.time_ms = time_ms
        self.loading: dict[int, int] = {}  # partition -> coordinator epoch being loaded
        self.cache: dict[int, _CacheEntry] = {}
        self.shutting_down = False

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def validate_transaction_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.max_timeout_ms

    # --- lookups -----------------------------------------------------------------------------
    def get_transaction_state(self, transactional_id: str
                              ) -> tuple[ErrorCode, CoordinatorEpochAndMetadata | None]:
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None
        entry = self.cache.get(p)
        if entry is None:
            return E.NOT_COORDINATOR, None
        md = entry.metadata.get(transactional_id)
        return E.NONE, (CoordinatorEpochAndMetadata(entry.coordinator_epoch, md)
                        if md is not None else None)

    def put_if_not_exists(self, md: TransactionMetadata
                          ) -> tuple[ErrorCode, CoordinatorEpochAndMetadata | None]:
        p = self.partition_for(md.transactional_id)
        if p in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None
        entry = self.cache.get(p)
        if entry is None:
            return E.NOT_COORDINATOR, None
        current = entry.metadata.setdefault(md.transactional_id, md)
        return E.NONE, CoordinatorEpochAndMetadata(entry.coordinator_epoch, current)

    def all_metadata(self) -> Iterable[TransactionMetadata]:
        for entry in self.cache.values():
            yield from entry.metadata.values()

    # --- the log -----------------------------------------------------------------------------
    def _batch(self, records: list[tuple[bytes, bytes | None]]) -> bytearray:
        b = RecordBatchBuilder()
        now = self.time_ms()
        for k, v in records:
            b.append(now, k, v)
        return bytearray(b.build())

    async def _append(self, partition: int, records, timeout_ms: int) -> ErrorCode:
        r = await self.runtime.append_batch(TRANSACTION_STATE_TOPIC, partition,
                                            self._batch(records), timeout_ms)
        if r.error:
            log.warning("append to %s-%d failed: %s %s", TRANSACTION_STATE_TOPIC, partition,
                        ErrorCode(r.error).name, r.error_message or "")
        return _APPEND_ERRORS.get(ErrorCode(r.error), ErrorCode(r.error))

    async def append_transaction_to_log(self, transactional_id: str, coordinator_epoch: int,
                                        transit: TxnTransitMetadata,
                                        retry_on_error: Callable[[ErrorCode], bool]
                                        = lambda e: False) -> ErrorCode:
        """Write `transit` and complete the pending transition (module docstring)."""
        err, found = self.get_transaction_state(transactional_id)
        if err != E.NONE:
            return err
        if found is None or found.coordinator_epoch != coordinator_epoch:
            return E.NOT_COORDINATOR
        error = await self._append(self.partition_for(transactional_id),
                                   [(key_bytes(transactional_id), value_bytes(transit))],
                                   transit.txn_timeout_ms)
        cur_err, cur = self.get_transaction_state(transactional_id)
        if error == E.NONE:
            if cur_err != E.NONE:
                log.info("transaction state of %s became %s while appending %s",
                         transactional_id, cur_err.name, transit)
                return cur_err
            if cur is None or cur.coordinator_epoch != coordinator_epoch:
                return E.NOT_COORDINATOR
            cur.metadata.complete_transition(transit)
            return E.NONE
        if cur_err == E.NONE and cur is not None and cur.coordinator_epoch == coordinator_epoch:
            if not retry_on_error(error):
                cur.metadata.pending_state = None
            log.info("appending %s for %s failed: %s", transit.txn_state, transactional_id,
                     error.name)
        return error

    # --- loading -----------------------------------------------------------------------------
    async def load_partition(self, partition: int, coordinator_epoch: int
                             ) -> list[tuple[str, TransactionMetadata]] | None:
        """Replay the partition (module docstring). Returns the (id, metadata) of transactions
        left in PrepareCommit/PrepareAbort, or None when the load was abandoned (leadership
        moved on). Raises on an I/O failure (the caller retries)."""
        self.loading[partition] = coordinator_epoch
        start = time.monotonic()

        def current() -> bool:
            return not self.shutting_down and self.loading.get(partition) == coordinator_epoch

        loaded = await self._read_partition(partition, current)
        if not current():
            return None
        del self.loading[partition]
        previous = self.cache.get(partition)
        if previous is not None and previous.metadata:  # a new leader epoch, same leader
            log.info("Unloaded %d transactional ids of %s-%d as part of loading metadata at "
                     "epoch %d", len(previous.metadata), TRANSACTION_STATE_TOPIC, partition,
                     coordinator_epoch)
        self.cache[partition] = _CacheEntry(coordinator_epoch, loaded)
        log.info("Loaded %d transaction metadata from %s-%d (epoch %d) in %.1f ms", len(loaded),
                 TRANSACTION_STATE_TOPIC, partition, coordinator_epoch,
                 (time.monotonic() - start) * 1000)
        return [(tid, md) for tid, md in loaded.items()
                if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)]

    async def _read_partition(self, partition: int, current: Callable[[], bool]
                              ) -> dict[str, TransactionMetadata]:
        out: dict[str, TransactionMetadata] = {}
        if self.runtime.log_end_offset(TRANSACTION_STATE_TOPIC, partition) < 0:
            log.warning("no log for %s-%d to load transactions from", TRANSACTION_STATE_TOPIC,
                        partition)
            return out
        try:
            async for records in self.runtime.read(TRANSACTION_STATE_TOPIC, partition, current):
                for rec in records:
                    try:
                        txn_id, md = decode_record(rec.key, rec.value)
                    except (KafkaError, ValueError) as e:
                        log.warning("skipping unreadable record at %s-%d offset %d: %s",
                                    TRANSACTION_STATE_TOPIC, partition, rec.offset, e)
                        continue
                    if md is None:
                        out.pop(txn_id, None)
                    else:
                        out[txn_id] = md
        except KafkaError as e:
            if e.code != ErrorCode.CORRUPT_MESSAGE:
                raise
            log.warning("%s; stopping the load", e.message)
        return out

    def unload_partition(self, partition: int) -> None:
        self.loading.pop(partition, None)
        entry = self.cache.pop(partition, None)
        if entry is not None:
            log.info("Unloaded %d transactional ids of %s-%d", len(entry.metadata),
                     TRANSACTION_STATE_TOPIC, partition)

    def is_loading(self, partition: int) -> bool:
        return partition in self.loading

    @property
    def owned(self) -> set[int]:
        return set(self.cache)

    # --- timeouts and expiration ---------------------------------------------------------------
    def timed_out_transactions(self, now_ms: int | None = None
                               ) -> list[tuple[str, int, int]]:
        """(id, producer id, epoch) of Ongoing transactions past their timeout."""
        now = self.time_ms() if now_ms is None else now_ms
        return [(md.transactional_id, md.producer_id, md.producer_epoch)
                for md in self.all_metadata()
                if md.pending_state is None and md.state == S.ONGOING
                and md.txn_start_timestamp + md.txn_timeout_ms < now]

    async def remove_expired_transactional_ids(self, now_ms: int | None = None) -> int:
        """Tombstone and forget ids idle for `transactional.id.expiration.ms` in Empty /
        CompleteCommit / CompleteAbort (Kafka's removeExpiredTransactionalIds). Returns how
        many were removed."""
        now = self.time_ms() if now_ms is None else now_ms
        removed = 0
        for partition, entry in list(self.cache.items()):
            expired = []
            for md in entry.metadata.values():
                if md.pending_state is None and md.state.expiration_allowed and \
                        md.txn_last_update_timestamp <= now - \
                        self.config.transactional_id_expiration_ms:
                    expired.append((md, md.prepare_dead()))
            if not expired:
                continue
            error = await self._append(partition, [(key_bytes(md.transactional_id), None)
                                                   for md, _ in expired],
                                       self.config.request_timeout_ms)
            cur = self.cache.get(partition)
            for md, transit in expired:
                if error == E.NONE and cur is entry and md.pending_state == S.DEAD and \
                        md.producer_epoch == transit.producer_epoch and \
                        entry.metadata.get(md.transactional_id) is md:
                    del entry.metadata[md.transactional_id]
                    md.state = S.DEAD
                    md.pending_state = None
                    removed += 1
                else:
                    log.warning("could not expire transactional id %s: %s",
                                md.transactional_id, error.name)
                    md.pending_state = None
        if removed:
            log.info("Removed %d expired transactional ids", removed)
        return removed

    # --- listing -----------------------------------------------------------------------------
    def list_transaction_states(self, producer_ids: Iterable[int], state_names: Iterable[str],
                                duration_ms: int = -1
                                ) -> tuple[ErrorCode, list[str], list[TransactionMetadata]]:
        """(error, unknown state filters, matching metadata) for ListTransactions: Dead ids
        never; COORDINATOR_LOAD_IN_PROGRESS while a partition loads."""
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, [], []
        pids = set(producer_ids)
        states, unknown = set(), []
        names = list(state_names)
        for name in names:
            s = TransactionState.from_name(name)
            if s is None:
                unknown.append(name)
            else:
                states.add(s)
        now = self.time_ms()
        out = []
        for md in self.all_metadata():
            if md.state == S.DEAD or (pids and md.producer_id not in pids) or \
                    (names and md.state not in states) or \
                    (duration_ms >= 0 and now - md.txn_start_timestamp <= duration_ms):
                continue
            out.append(md)
        return E.NONE, unknown, out

    def shutdown(self) -> None:
        self.shutting_down = True
        self.loading.clear()
        self.cache.clear()
