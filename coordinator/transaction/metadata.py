"""Transaction state and its transitions (Kafka's TransactionMetadata / TransactionState,
KIP-98, with KIP-360's epoch bumps and KIP-890 part 2's transaction version 2).

States and the states they may be entered from (`VALID_PREVIOUS`)::

    Empty             <- Empty, CompleteCommit, CompleteAbort      (InitProducerId)
    Ongoing           <- Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitions/Offsets)
    PrepareCommit     <- Ongoing                                   (EndTxn commit)
    PrepareAbort      <- Ongoing, PrepareEpochFence                (EndTxn abort, fencing,
                                                                    timeout)
    CompleteCommit    <- PrepareCommit                             (markers written)
    CompleteAbort     <- PrepareAbort
    Dead              <- Empty, CompleteCommit, CompleteAbort      (transactional id expired)
    PrepareEpochFence <- Ongoing                                   (never persisted: an
                         InitProducerId or a timeout fences the producer and aborts)

A change is two steps, as in Kafka: `prepare_*` checks the move and returns a
`TxnTransitMetadata` while setting `pending_state` (so concurrent requests see
CONCURRENT_TRANSACTIONS); once the record is in `__transaction_state`,
`complete_transition(transit)` applies it (or the caller clears `pending_state` on failure).
Illegal moves raise `IllegalTransition` (a bug, never client input).

The state ids (`TransactionState.id`) are the `TransactionStatus` values of the
`TransactionLogValue` record.

Transaction version 2 (`client_transaction_version` >= 2, coordinator.transaction
.versions): PrepareCommit/PrepareAbort carry the producer epoch + 1 (`last_producer_epoch`
the one the client used), so the markers fence the ended transaction's epoch; when that bump
would exhaust the epoch, `next_producer_id` holds a fresh producer id that CompleteCommit /
CompleteAbort switch to (epoch 0, `previous_producer_id` the old one).
"""

from __future__ import annotations

import dataclasses
import enum

__all__ = ["TransactionState", "TransactionMetadata", "TxnTransitMetadata",
           "IllegalTransition", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "is_epoch_exhausted",
           "VALID_PREVIOUS"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767


class TransactionState(enum.Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def state_name(self) -> str:
        return self.value[1]

    def __str__(self) -> str:
        return self.value[1]

    @property
    def expiration_allowed(self) -> bool:
        return self in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for s in cls:
            if s.id == state_id:
                return s
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        for s in cls:
            if s.state_name == name:
                return s
        return None


S = TransactionState

VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's isEpochExhausted: no room left for another bump (>= Short.MaxValue - 1)."""
    return epoch >= SHORT_MAX - 1


class IllegalTransition(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class TxnTransitMetadata:
    """The target of a prepared transition (what is written to `__transaction_state`)."""

    producer_id: int
    prev_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[tuple[str, int]]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    @property
    def supports_epoch_bump(self) -> bool:
        return self.client_transaction_version >= 2


class TransactionMetadata:
    """One transactional id's state (Kafka's TransactionMetadata). Event loop only."""

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 txn_timeout_ms: int, state: TransactionState = S.EMPTY, *,
                 previous_producer_id: int = NO_PRODUCER_ID,
                 last_producer_epoch: int = NO_PRODUCER_EPOCH,
                 topic_partitions: set[tuple[str, int]] | None = None,
                 txn_start_timestamp: int = -1, txn_last_update_timestamp: int = -1,
                 next_producer_id: int = NO_PRODUCER_ID,
                 client_transaction_version: int = 0) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.previous_producer_id = previous_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        self.topic_partitions: set[tuple[str, int]] = set(topic_partitions or ())
        self.txn_start_timestamp = txn_start_timestamp
        self.txn_last_update_timestamp = txn_last_update_timestamp
        self.pending_state: TransactionState | None = None
        self.has_failed_epoch_fence = False
        self.next_producer_id = next_producer_id
        self.client_transaction_version = client_transaction_version

    @property
    def supports_epoch_bump(self) -> bool:
        """A transaction version 2 transaction (KIP-890 part 2)."""
        return self.client_transaction_version >= 2

    def __repr__(self) -> str:
        return (f"TransactionMetadata({self.transactional_id!r}, pid={self.producer_id}, "
                f"epoch={self.producer_epoch}, state={self.state}, "
                f"pending={self.pending_state}, partitions={sorted(self.topic_partitions)})")

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT)

    def remove_partition(self, tp: tuple[str, int]) -> None:
        """A marker for `tp` was written (or `tp` is gone): stop waiting for it."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransition(f"{self.transactional_id}: removing a marked partition in "
                                    f"state {self.state}")
        self.topic_partitions.discard(tp)

    # --- prepare ---------------------------------------------------------------------------
    def prepare_no_transit(self) -> TxnTransitMetadata:
        return TxnTransitMetadata(self.producer_id, self.previous_producer_id,
                                  self.producer_epoch, self.last_producer_epoch,
                                  self.txn_timeout_ms, self.state,
                                  frozenset(self.topic_partitions), self.txn_start_timestamp,
                                  self.txn_last_update_timestamp, self.next_producer_id,
                                  self.client_transaction_version)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Ongoing -> PrepareEpochFence with the epoch bumped (not bumped again after a
        failed fence), so the abort that follows fences the current producer."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransition("cannot fence a producer at epoch Short.MaxValue")
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, epoch, NO_PRODUCER_EPOCH,
                             self.txn_timeout_ms, self.topic_partitions,
                             self.txn_start_timestamp, self.txn_last_update_timestamp)

    def prepare_increment_producer_epoch(self, new_timeout_ms: int,
                                         expected_epoch: int | None, now_ms: int
                                         ) -> TxnTransitMetadata | None:
        """-> Empty with the epoch bumped (InitProducerId). With KIP-360's expected epoch: a
        retry of the bump that already happened keeps the current epoch; any other epoch
        returns None (PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(f"no producer epochs left for {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(S.EMPTY, self.producer_id, epoch, last, new_timeout_ms, (), -1,
                             now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_timeout_ms: int,
                                     now_ms: int, record_last_epoch: bool
                                     ) -> TxnTransitMetadata:
        """-> Empty under a new producer id at epoch 0 (the epoch ran out)."""
        if self.has_pending_transaction:
            raise IllegalTransition("cannot rotate producer ids while a transaction is pending")
        return self._prepare(S.EMPTY, new_producer_id, 0,
                             self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             new_timeout_ms, (), -1, now_ms)

    def prepare_add_partitions(self, added: set[tuple[str, int]], now_ms: int,
                               client_transaction_version: int | None = None
                               ) -> TxnTransitMetadata:
        """-> Ongoing. A transaction that starts here takes `client_transaction_version`
        (2 for the implicit adds of KIP-890 part 2); an Ongoing one keeps its own."""
        starts = self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT)
        start = now_ms if starts else self.txn_start_timestamp
        tv = self.client_transaction_version
        if client_transaction_version is not None and (starts or client_transaction_version > tv):
            tv = client_transaction_version
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms,
                             self.topic_partitions | set(added), start, now_ms,
                             client_transaction_version=tv)

    def prepare_abort_or_commit(self, new_state: TransactionState, now_ms: int,
                                client_transaction_version: int = 0,
                                next_producer_id: int = NO_PRODUCER_ID,
                                bump_epoch: bool | None = None) -> TxnTransitMetadata:
        """-> PrepareCommit / PrepareAbort. Transaction version 2 bumps the epoch
        (`bump_epoch` False: an epoch fence already did) and may name the next producer id."""
        bump = client_transaction_version >= 2 if bump_epoch is None else bump_epoch
        epoch, last = (self.producer_epoch + 1, self.producer_epoch) if bump \
            else (self.producer_epoch, self.last_producer_epoch)
        return self._prepare(new_state, self.producer_id, epoch, last, self.txn_timeout_ms,
                             self.topic_partitions, self.txn_start_timestamp, now_ms,
                             next_producer_id, client_transaction_version)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        new_state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        tv = self.client_transaction_version
        if tv >= 2:  # an exhausted epoch moves to the next producer id now the markers are out
            pid, epoch = (self.next_producer_id, 0) if self.next_producer_id != NO_PRODUCER_ID \
                else (self.producer_id, self.producer_epoch)
            return self._prepare(new_state, pid, epoch, self.producer_epoch,
                                 self.txn_timeout_ms, (), self.txn_start_timestamp, now_ms,
                                 client_transaction_version=tv)
        return self._prepare(new_state, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, (),
                             self.txn_start_timestamp, now_ms, client_transaction_version=tv)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, (),
                             self.txn_start_timestamp, self.txn_last_update_timestamp)

    def _prepare(self, state: TransactionState, producer_id: int, epoch: int, last_epoch: int,
                 timeout_ms: int, partitions, start_ts: int, update_ts: int,
                 next_producer_id: int = NO_PRODUCER_ID, client_transaction_version: int = 0
                 ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransition(f"{self.transactional_id}: preparing {state} while "
                                    f"{self.pending_state} is pending")
        if producer_id < 0:
            raise IllegalTransition(f"illegal producer id {producer_id}")
        if state != S.DEAD and epoch < 0:
            raise IllegalTransition(f"illegal producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state} -> {state} is not "
                                    "a valid transition")
        self.pending_state = state
        return TxnTransitMetadata(producer_id, self.producer_id, epoch, last_epoch, timeout_ms,
                                  state, frozenset(partitions), start_ts, update_ts,
                                  next_producer_id, client_transaction_version)

    # --- complete --------------------------------------------------------------------------
    def complete_transition(self, t: TxnTransitMetadata) -> None:
        """Apply a prepared transition after its record was written (Kafka's
        completeTransitionTo); IllegalTransition if it does not match the pending one."""
        to = self.pending_state
        if to is None or to != t.txn_state:
            raise IllegalTransition(f"{self.transactional_id}: completing {t.txn_state} "
                                    f"while {to} is pending")
        same_producer = self._same_producer(t)
        if to == S.EMPTY:
            bump = t.producer_epoch == self.producer_epoch + 1 or \
                (t.producer_epoch == 0 and t.producer_id != self.producer_id)
            if (t.producer_epoch != self.producer_epoch and not bump) or t.topic_partitions \
                    or t.txn_start_timestamp != -1:
                self._fail(t)
            self.txn_timeout_ms = t.txn_timeout_ms
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.previous_producer_id = t.prev_producer_id
            self.producer_id = t.producer_id
        elif to == S.ONGOING:
            if not same_producer or not self.topic_partitions <= t.topic_partitions or \
                    self.txn_timeout_ms != t.txn_timeout_ms:
                self._fail(t)
            self.txn_start_timestamp = t.txn_start_timestamp
            self.topic_partitions |= t.topic_partitions
        elif to in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            if not same_producer or self.topic_partitions != t.topic_partitions or \
                    self.txn_timeout_ms != t.txn_timeout_ms or \
                    self.txn_start_timestamp != t.txn_start_timestamp:
                self._fail(t)
            if t.supports_epoch_bump:
                self.producer_epoch = t.producer_epoch
                self.last_producer_epoch = t.last_producer_epoch
                self.next_producer_id = t.next_producer_id
        elif to in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            if not same_producer or self.txn_timeout_ms != t.txn_timeout_ms or \
                    t.txn_start_timestamp == -1:
                self._fail(t)
            self.txn_start_timestamp = t.txn_start_timestamp
            self.topic_partitions.clear()
            if t.supports_epoch_bump:
                self.producer_epoch = t.producer_epoch
                self.last_producer_epoch = t.last_producer_epoch
                self.previous_producer_id = t.prev_producer_id
                self.producer_id = t.producer_id
                self.next_producer_id = t.next_producer_id
        else:  # PrepareEpochFence is never written; Dead entries are removed, not completed
            self._fail(t)
        self.client_transaction_version = t.client_transaction_version
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.pending_state = None
        self.state = to

    def _same_producer(self, t: TxnTransitMetadata) -> bool:
        """Kafka's validProducerEpoch: the transition is for the current producer id and
        epoch (with transaction version 2 a Prepare carries epoch + 1 and names the current
        one as its last epoch; a Complete after an exhausted epoch names the old id)."""
        tv2 = t.supports_epoch_bump
        overflow = tv2 and t.txn_state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and \
            t.producer_epoch == 0 and t.producer_id != self.producer_id
        prepare = tv2 and t.txn_state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) and \
            t.producer_epoch == self.producer_epoch + 1
        epoch = t.last_producer_epoch if overflow or prepare else t.producer_epoch
        pid = t.prev_producer_id if overflow else t.producer_id
        return epoch == self.producer_epoch and pid == self.producer_id

    def _fail(self, t: TxnTransitMetadata) -> None:
        raise IllegalTransition(f"{self.transactional_id}: cannot complete {self.state} -> "
                                f"{t.txn_state} with {t}")
