"""`TransactionCoordinator`: the transactional APIs' logic (Kafka's TransactionCoordinator,
KIP-98; KIP-360 epoch bumps, KIP-588 recovery, KIP-890 part 1 verification).

Results are `ErrorCode`s (with ids/epochs where the API returns them); everything runs on
the event loop. Errors per operation:

- `handle_init_producer_id(txn_id, timeout_ms, expected)` -> (error, pid, epoch):
  INVALID_REQUEST (empty id), INVALID_TRANSACTION_TIMEOUT (<= 0 or above
  `transaction.max.timeout.ms`), COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR,
  CONCURRENT_TRANSACTIONS (a transition in flight, a PrepareCommit/PrepareAbort waiting for
  its markers, or an Ongoing transaction that this request just fenced and aborted: the
  client retries), PRODUCER_FENCED (KIP-360/588 `expected` (pid, epoch) is neither the
  current nor the previous one). A new id gets a producer id and epoch 0; an existing one its
  epoch bumped (a new producer id when the epoch is exhausted).
- `handle_add_partitions(txn_id, pid, epoch, partitions)` -> error: INVALID_REQUEST,
  INVALID_PRODUCER_ID_MAPPING (unknown id or other producer id), PRODUCER_FENCED (other
  epoch), CONCURRENT_TRANSACTIONS, COORDINATOR_*; -> Ongoing.
- `handle_verify_partitions(...)` -> {tp: error} (AddPartitionsToTxn v4+ verify_only, the
  KIP-890 check of a partition leader): NONE when the partition is in the transaction, else
  TRANSACTION_ABORTABLE; whole-request errors as above.
- `handle_end_transaction(txn_id, pid, epoch, commit, tv)` -> (error, pid, epoch): Ongoing
  -> PrepareCommit/PrepareAbort (written), then the markers go out and the answer is NONE;
  a retried EndTxn of a completed transaction with the same result answers NONE, with the
  other result INVALID_TXN_STATE; PrepareX answers CONCURRENT_TRANSACTIONS (same result) or
  INVALID_TXN_STATE; Empty INVALID_TXN_STATE. With transaction version 2 (`tv` 2, KIP-890
  part 2) the epoch is bumped and the answer carries the new producer id and epoch (a new
  producer id at epoch 0 when the epoch ran out); a retry (the client's epoch is the
  bumped one - 1, or the old producer id after a rotation) answers like the first call, any
  other epoch PRODUCER_FENCED.
- `handle_add_partitions(..., tv)`: with `tv` 2 (the implicit add of a Produce v12+ /
  TxnOffsetCommit v5+) a transaction started here becomes a transaction version 2 one.
- `handle_describe(txn_id)`, `handle_list(pids, states, duration_ms)`: DescribeTransactions /
  ListTransactions (COORDINATOR_NOT_AVAILABLE when not active, TRANSACTIONAL_ID_NOT_FOUND).
- Timed-out Ongoing transactions are fenced (epoch + 1) and aborted every
  `transaction.abort.timed.out.transaction.cleanup.interval.ms`; expired transactional ids
  are removed every `transaction.remove.expired.transaction.cleanup.interval.ms`.
- Leadership of `__transaction_state` partitions: `on_election(p, epoch)` loads (retried
  with backoff on failure while still leader) and resends the markers of PrepareX
  transactions; `on_resignation(p)` unloads.
Authorization (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is the handlers' job
(`broker.handlers.transactions.authorize_transactional_id`).
"""

from __future__ import annotations

import asyncio
import logging

from coordinator.transaction.marker_channel import TransactionMarkerChannelManager
from coordinator.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from coordinator.transaction.state_manager import (
    LOAD_RETRY_BACKOFF_MS,
    LOAD_RETRY_MAX_BACKOFF_MS,
    TransactionStateManager,
)
from coordinator.transaction.tasks import TaskSet
from protocol.errors import ErrorCode, KafkaError

__all__ = ["TransactionCoordinator"]

log = logging.getLogger(__name__)
E = ErrorCode
S = TransactionState


class TransactionCoordinator:
    """See the module docstring. `producer_id_manager.generate_producer_id()` gives ids."""

    def __init__(self, broker_id: int, state_manager: TransactionStateManager,
                 marker_channel: TransactionMarkerChannelManager, producer_id_manager) -> None:
        self.broker_id = broker_id
        self.state = state_manager
        self.markers = marker_channel
        self.producer_id_manager = producer_id_manager
        self.active = False
        self._tasks = TaskSet()

    @property
    def config(self):
        return self.state.config

    def partition_for(self, transactional_id: str) -> int:
        return self.state.partition_for(transactional_id)

    # --- lifecycle ---------------------------------------------------------------------------
    def startup(self, background: bool = True) -> None:
        self.markers.start()
        if background:
            self._tasks.spawn(self._every(self.config.abort_timed_out_interval_ms,
                                          self.abort_timed_out_transactions),
                              name="txn-abort-timed-out")
            self._tasks.spawn(self._every(self.config.remove_expired_interval_ms,
                                          self.state.remove_expired_transactional_ids),
                              name="txn-id-expiration")
        self.active = True

    async def shutdown(self) -> None:
        self.active = False
        await self._tasks.cancel_all()
        await self.markers.shutdown()
        self.state.shutdown()

    async def _every(self, interval_ms: int, fn) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await fn()
            except Exception:  # noqa: BLE001 - a failed pass must not stop the next
                log.exception("transaction coordinator background task failed")

    def _spawn(self, coro) -> asyncio.Task:
        return self._tasks.spawn(coro)

    # --- partition leadership ----------------------------------------------------------------
    def on_election(self, partition: int, coordinator_epoch: int) -> asyncio.Task | None:
        owned = self.state.cache.get(partition)
        if owned is not None and owned.coordinator_epoch == coordinator_epoch:
            return None
        if self.state.loading.get(partition) == coordinator_epoch:
            return None
        log.info("Elected as the txn coordinator for partition %d at epoch %d", partition,
                 coordinator_epoch)
        self.markers.remove_markers_for_txn_partition(partition)
        self.state.loading[partition] = coordinator_epoch
        return self._spawn(self._load(partition, coordinator_epoch))

    async def _load(self, partition: int, epoch: int, attempt: int = 1) -> None:
        while True:
            try:
                pending = await self.state.load_partition(partition, epoch)
            except Exception as e:  # noqa: BLE001 - retried while still the leader
                if self.state.loading.get(partition) != epoch:
                    return
                delay = min(LOAD_RETRY_BACKOFF_MS << min(attempt - 1, 20),
                            LOAD_RETRY_MAX_BACKOFF_MS)
                log.error("Loading __transaction_state-%d (epoch %d, attempt %d) failed: %r; "
                          "retrying in %d ms", partition, epoch, attempt, e, delay,
                          exc_info=attempt == 1)
                await asyncio.sleep(delay / 1000)
                attempt += 1
                if self.state.loading.get(partition) != epoch:
                    return
                continue
            break
        if pending is None:
            return
        now = self.state.time_ms()
        for txn_id, md in pending:
            commit = md.state == S.PREPARE_COMMIT
            log.info("Sending txn markers for %s (%s) after loading partition %d", txn_id,
                     md.state, partition)
            self.markers.add_txn_markers_to_send(epoch, commit, md, md.prepare_complete(now))

    def owned_partitions(self) -> set[int]:
        """The ``__transaction_state`` partitions loaded or loading here."""
        return set(self.state.cache) | set(self.state.loading)

    def on_resignation(self, partition: int) -> None:
        if partition in self.state.cache or partition in self.state.loading:
            log.info("Resigned as the txn coordinator for partition %d", partition)
        self.state.unload_partition(partition)
        self.markers.remove_markers_for_txn_partition(partition)

    # --- InitProducerId ----------------------------------------------------------------------
    async def handle_init_producer_id(self, transactional_id: str, timeout_ms: int,
                                      expected: tuple[int, int] | None = None
                                      ) -> tuple[ErrorCode, int, int]:
        fail = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if transactional_id == "":
            return (E.INVALID_REQUEST, *fail)
        if not self.state.validate_transaction_timeout(timeout_ms):
            return (E.INVALID_TRANSACTION_TIMEOUT, *fail)
        err, found = self.state.get_transaction_state(transactional_id)
        if err != E.NONE:
            return (err, *fail)
        if found is None:
            try:
                pid = await self.producer_id_manager.generate_producer_id()
            except KafkaError as e:
                return (e.code, *fail)
            created = TransactionMetadata(transactional_id, pid, NO_PRODUCER_EPOCH, timeout_ms,
                                          S.EMPTY,
                                          txn_last_update_timestamp=self.state.time_ms())
            err, found = self.state.put_if_not_exists(created)
            if err != E.NONE:
                return (err, *fail)
        new_pid = None
        while True:
            err, found = self.state.get_transaction_state(transactional_id)
            if err != E.NONE or found is None:
                return (err if err != E.NONE else E.NOT_COORDINATOR, *fail)
            result = self._prepare_init_transit(found.metadata, timeout_ms, expected, new_pid)
            if result == "need-pid":
                try:
                    new_pid = await self.producer_id_manager.generate_producer_id()
                except KafkaError as e:
                    return (e.code, *fail)
                continue
            break
        if isinstance(result, ErrorCode):
            return (result, *fail)
        epoch, transit = found.coordinator_epoch, result
        if transit.txn_state == S.PREPARE_EPOCH_FENCE:
            err, _, _ = await self._end_transaction(transactional_id, transit.producer_id,
                                                    transit.producer_epoch, False,
                                                    from_client=False)
            return (err if err != E.NONE else E.CONCURRENT_TRANSACTIONS, *fail)
        err = await self.state.append_transaction_to_log(transactional_id, epoch, transit)
        if err != E.NONE:
            log.info("InitProducerId of %s answers %s", transactional_id, err.name)
            return (err, *fail)
        log.info("Initialized transactionalId %s with producerId %d and producer epoch %d on "
                 "partition __transaction_state-%d", transactional_id, transit.producer_id,
                 transit.producer_epoch, self.partition_for(transactional_id))
        return E.NONE, transit.producer_id, transit.producer_epoch

    def _prepare_init_transit(self, md: TransactionMetadata, timeout_ms: int,
                              expected: tuple[int, int] | None, new_pid: int | None):
        def valid_producer(pid: int, epoch: int) -> bool:
            return md.producer_epoch == NO_PRODUCER_EPOCH or pid == md.producer_id or \
                (pid == md.previous_producer_id and is_epoch_exhausted(epoch))

        if md.pending_transition_in_progress:
            return E.CONCURRENT_TRANSACTIONS
        if expected is not None and not valid_producer(*expected):
            return E.PRODUCER_FENCED
        now = self.state.time_ms()
        if md.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return E.CONCURRENT_TRANSACTIONS
        if md.state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if md.is_producer_epoch_exhausted and \
                    (expected is None or expected[1] == md.producer_epoch):
                if new_pid is None:
                    return "need-pid"
                return md.prepare_producer_id_rotation(new_pid, timeout_ms, now,
                                                       expected is not None)
            transit = md.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], now)
            return E.PRODUCER_FENCED if transit is None else transit
        if md.state == S.ONGOING:
            return md.prepare_fence_producer_epoch()
        raise IllegalTransition(f"{md.transactional_id} found in state {md.state}")

    # --- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------
    def _producer_error(self, md: TransactionMetadata, pid: int, epoch: int) -> ErrorCode:
        if md.producer_id != pid:
            return E.INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != epoch:
            return E.PRODUCER_FENCED
        return E.NONE

    async def handle_add_partitions(self, transactional_id: str, producer_id: int,
                                    producer_epoch: int, partitions: set[tuple[str, int]],
                                    client_transaction_version: int | None = None
                                    ) -> ErrorCode:
        if not transactional_id:
            return E.INVALID_REQUEST
        err, found = self.state.get_transaction_state(transactional_id)
        if err != E.NONE:
            return err
        if found is None:
            return E.INVALID_PRODUCER_ID_MAPPING
        md = found.metadata
        err = self._producer_error(md, producer_id, producer_epoch)
        if err != E.NONE:
            return err
        if md.pending_transition_in_progress or \
                md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return E.CONCURRENT_TRANSACTIONS
        if md.state == S.ONGOING and set(partitions) <= md.topic_partitions:
            return E.NONE
        transit = md.prepare_add_partitions(set(partitions), self.state.time_ms(),
                                            client_transaction_version)
        return await self.state.append_transaction_to_log(transactional_id,
                                                          found.coordinator_epoch, transit)

    def handle_verify_partitions(self, transactional_id: str, producer_id: int,
                                 producer_epoch: int, partitions: set[tuple[str, int]]
                                 ) -> dict[tuple[str, int], ErrorCode]:
        def all_(error: ErrorCode) -> dict:
            return {tp: error for tp in partitions}

        if not transactional_id:
            return all_(E.INVALID_REQUEST)
        err, found = self.state.get_transaction_state(transactional_id)
        if err != E.NONE:
            return all_(err)
        if found is None:
            return all_(E.INVALID_PRODUCER_ID_MAPPING)
        md = found.metadata
        err = self._producer_error(md, producer_id, producer_epoch)
        if err != E.NONE:
            return all_(err)
        if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return all_(E.CONCURRENT_TRANSACTIONS)
        return {tp: E.NONE if tp in md.topic_partitions else E.TRANSACTION_ABORTABLE
                for tp in partitions}

    # --- EndTxn ------------------------------------------------------------------------------
    async def handle_end_transaction(self, transactional_id: str, producer_id: int,
                                     producer_epoch: int, commit: bool,
                                     client_transaction_version: int = 0
                                     ) -> tuple[ErrorCode, int, int]:
        return await self._end_transaction(transactional_id, producer_id, producer_epoch,
                                           commit, from_client=True,
                                           client_transaction_version=client_transaction_version)

    @staticmethod
    def _end_txn_epoch_bumped(md: TransactionMetadata, producer_epoch: int) -> bool:
        """Kafka's endTxnEpochBumped: a transaction version 2 transaction whose epoch is the
        client's + 1 (the client retries an EndTxn that already bumped it)."""
        return md.pending_state != S.PREPARE_EPOCH_FENCE and md.supports_epoch_bump and \
            md.producer_epoch == producer_epoch + 1

    async def _end_transaction(self, transactional_id: str, producer_id: int,
                               producer_epoch: int, commit: bool, from_client: bool,
                               client_transaction_version: int = 0
                               ) -> tuple[ErrorCode, int, int]:
        fail = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if not transactional_id:
            return (E.INVALID_REQUEST, *fail)
        err, found = self.state.get_transaction_state(transactional_id)
        if err != E.NONE:
            return (err, *fail)
        if found is None:
            return (E.INVALID_PRODUCER_ID_MAPPING, *fail)
        md, coordinator_epoch = found.metadata, found.coordinator_epoch
        current = (md.producer_id, md.producer_epoch)
        is_epoch_fence = False
        tv2 = md.pending_state != S.PREPARE_EPOCH_FENCE and md.supports_epoch_bump
        # TV 2: a retry after the bump ran the epoch out carries the old producer id
        retry_on_overflow = tv2 and md.previous_producer_id == producer_id and \
            producer_epoch == SHORT_MAX - 1 and md.producer_epoch == 0
        retry_on_bump = self._end_txn_epoch_bumped(md, producer_epoch)
        if tv2:  # the same epoch is the next EndTxn, not a retry: only retries match
            if md.state in (S.ONGOING, S.EMPTY, S.DEAD, S.PREPARE_EPOCH_FENCE):
                valid_epoch = producer_epoch == md.producer_epoch
            elif md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                valid_epoch = retry_on_bump
            else:
                valid_epoch = retry_on_bump or retry_on_overflow
        else:
            valid_epoch = (not from_client or producer_epoch == md.producer_epoch) and \
                producer_epoch >= md.producer_epoch
        if md.producer_id != producer_id and not retry_on_overflow:
            return (E.INVALID_PRODUCER_ID_MAPPING, *fail)
        if not valid_epoch:
            return (E.PRODUCER_FENCED, *fail)
        if md.pending_transition_in_progress and md.pending_state != S.PREPARE_EPOCH_FENCE:
            return (E.CONCURRENT_TRANSACTIONS, *fail)
        if md.state == S.ONGOING:
            next_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            # TV 2 from a client; a fence (InitProducerId, timeout) keeps the transaction's
            # own version and does not bump the epoch a second time (KAFKA-19367)
            tv = client_transaction_version if from_client else md.client_transaction_version
            next_pid = NO_PRODUCER_ID
            if tv >= 2 and from_client and md.pending_state != S.PREPARE_EPOCH_FENCE and \
                    md.is_producer_epoch_exhausted:
                try:
                    next_pid = await self.producer_id_manager.generate_producer_id()
                except KafkaError as e:
                    return (e.code, *fail)
                if md.pending_transition_in_progress or md.state != S.ONGOING:
                    return (E.CONCURRENT_TRANSACTIONS, *fail)
            if next_state == S.PREPARE_ABORT and md.pending_state == S.PREPARE_EPOCH_FENCE:
                is_epoch_fence = True
                md.pending_state = None
                md.producer_epoch = producer_epoch
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = md.prepare_abort_or_commit(
                next_state, self.state.time_ms(), tv, next_pid,
                bump_epoch=tv >= 2 and not is_epoch_fence and from_client)
        elif md.state == S.COMPLETE_COMMIT:
            return (E.NONE, *current) if commit else (self._invalid(md, commit), *fail)
        elif md.state == S.COMPLETE_ABORT:
            return (E.NONE, *current) if not commit else (self._invalid(md, commit), *fail)
        elif md.state == S.PREPARE_COMMIT:
            return (E.CONCURRENT_TRANSACTIONS if commit else self._invalid(md, commit), *fail)
        elif md.state == S.PREPARE_ABORT:
            return (E.CONCURRENT_TRANSACTIONS if not commit else self._invalid(md, commit),
                    *fail)
        elif md.state == S.EMPTY:
            return (self._invalid(md, commit), *fail)
        else:
            raise IllegalTransition(f"{transactional_id} found in state {md.state}")

        error = await self.state.append_transaction_to_log(transactional_id, coordinator_epoch,
                                                           transit)
        if error != E.NONE:
            log.info("EndTxn of %s: appending %s failed with %s", transactional_id,
                     transit.txn_state, error.name)
            if is_epoch_fence:
                err, cur = self.state.get_transaction_state(transactional_id)
                if err == E.NONE and cur is not None and \
                        cur.coordinator_epoch == coordinator_epoch:
                    cur.metadata.has_failed_epoch_fence = True
            return (error, *fail)
        err, cur = self.state.get_transaction_state(transactional_id)
        if err != E.NONE:
            return (err, *fail)
        if cur is None or cur.coordinator_epoch != coordinator_epoch:
            return (E.NOT_COORDINATOR, *fail)
        md = cur.metadata
        if md.producer_id != producer_id:
            return (E.INVALID_PRODUCER_ID_MAPPING, *fail)
        if md.producer_epoch != producer_epoch and \
                not self._end_txn_epoch_bumped(md, producer_epoch):
            return (E.PRODUCER_FENCED, *fail)
        if md.pending_transition_in_progress:
            return (E.CONCURRENT_TRANSACTIONS, *fail)
        expected_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if md.state != expected_state:
            return (self._invalid(md, commit), *fail)
        complete = md.prepare_complete(self.state.time_ms())
        self.markers.add_txn_markers_to_send(coordinator_epoch, commit, md, complete)
        if md.supports_epoch_bump and md.next_producer_id != NO_PRODUCER_ID:
            return E.NONE, md.next_producer_id, 0  # the epoch ran out (KAFKA-18660)
        return E.NONE, md.producer_id, md.producer_epoch

    @staticmethod
    def _invalid(md: TransactionMetadata, commit: bool) -> ErrorCode:
        log.debug("TransactionalId %s is in state %s: cannot %s", md.transactional_id,
                  md.state, "commit" if commit else "abort")
        return E.INVALID_TXN_STATE

    # --- timeouts ------------------------------------------------------------------------------
    async def abort_timed_out_transactions(self) -> int:
        """Fence (epoch + 1) and abort every Ongoing transaction past its timeout (Kafka's
        abortTimedOutTransactions). Returns how many aborts were started."""
        started = 0
        for txn_id, pid, _epoch in self.state.timed_out_transactions():
            err, found = self.state.get_transaction_state(txn_id)
            if err != E.NONE or found is None:
                continue
            md = found.metadata
            if md.producer_id != pid or md.pending_transition_in_progress:
                continue
            transit = md.prepare_fence_producer_epoch()
            log.info("Aborting the timed-out transaction of %s (producer %d, epoch %d -> %d)",
                     txn_id, pid, md.producer_epoch, transit.producer_epoch)
            started += 1
            # awaited in turn: the fence and the abort's checks must run with no other
            # request in between (Kafka holds the metadata lock across both)
            await self._abort_timed_out(txn_id, transit.producer_id, transit.producer_epoch)
        return started

    async def _abort_timed_out(self, txn_id: str, pid: int, epoch: int) -> None:
        err, _, _ = await self._end_transaction(txn_id, pid, epoch, False, from_client=False)
        if err == E.NONE:
            log.info("Completed rollback of ongoing transaction for transactionalId %s due to "
                     "timeout", txn_id)
        else:
            log.info("Rollback of the timed-out transaction of %s answered %s", txn_id,
                     err.name)

    # --- Describe / List -----------------------------------------------------------------------
    def handle_describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE, None
        if not transactional_id:
            return E.INVALID_REQUEST, None
        err, found = self.state.get_transaction_state(transactional_id)
        if err != E.NONE:
            return err, None
        if found is None or found.metadata.state == S.DEAD:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return E.NONE, found.metadata

    def handle_list(self, producer_ids, states, duration_ms: int = -1):
        """(error, unknown state filters, [TransactionMetadata])."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE, [], []
        return self.state.list_transaction_states(producer_ids, states, duration_ms)
