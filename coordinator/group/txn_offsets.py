"""Transactional offset commits in the group coordinator (TxnOffsetCommit, KIP-98 / KIP-447;
Kafka's GroupCoordinator.handleTxnCommitOffsets and the pending-offset parts of
GroupMetadata / GroupMetadataManager).

- `handle_txn_commit_offsets(coordinator, verifier, ...)`: the coordinator checks of an
  offset commit (COORDINATOR_*, NOT_COORDINATOR; member / generation checks as for
  OffsetCommit, except that a non-empty group takes commits without a member id, as old
  clients send none), KIP-890 verification of the group's `__consumer_offsets` partition
  with the transaction coordinator, then the offsets are written as a transactional batch of
  the producer (its id and epoch, origin "coordinator": an older epoch is fenced with
  INVALID_PRODUCER_EPOCH) and kept as the group's pending offsets of that producer
  (`GroupMetadata.pending_txn_offsets`); OffsetFetch with `require_stable` answers
  UNSTABLE_OFFSET_COMMIT for them. Errors map as Kafka's maybeConvertOffsetCommitError
  (NETWORK_EXCEPTION -> COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION /
  NOT_ENOUGH_REPLICAS* -> COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER /
  KAFKA_STORAGE_ERROR -> NOT_COORDINATOR, size errors -> INVALID_COMMIT_OFFSET_SIZE);
  OFFSET_METADATA_TOO_LARGE per partition.
- `on_transaction_completed(coordinator, producer_id, partitions, commit)`: a marker was
  written to those `__consumer_offsets` partitions: the producer's pending offsets of their
  groups become committed (COMMIT) or are dropped (ABORT).
- `TxnOffsetReplay`: the same while loading a partition: offsets of transactional batches
  wait for their producer's marker; a COMMIT applies them unless a plain commit of the same
  partition was written after them (Kafka's CommitRecordMetadataAndOffset rule); what is
  still open at the end becomes the loaded groups' pending offsets.
"""

from __future__ import annotations

import logging

from coordinator.append_errors import COORDINATOR_APPEND_ERRORS
from coordinator.group.group import GroupMetadata, GroupState, OffsetAndMetadata
from coordinator.group.records import GROUP_METADATA_TOPIC, offset_commit_record
from coordinator.runtime import TransactionVerifier
from protocol.errors import ErrorCode, KafkaError
from protocol.record_builder import RecordBatchBuilder

__all__ = ["handle_txn_commit_offsets", "on_transaction_completed", "TxnOffsetReplay",
           "convert_offset_commit_error"]

log = logging.getLogger(__name__)
E = ErrorCode
_CONVERT = {
    **COORDINATOR_APPEND_ERRORS,
    E.NETWORK_EXCEPTION: E.COORDINATOR_LOAD_IN_PROGRESS,
    E.MESSAGE_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.RECORD_LIST_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.INVALID_FETCH_SIZE: E.INVALID_COMMIT_OFFSET_SIZE,
}


def convert_offset_commit_error(error: ErrorCode) -> ErrorCode:
    return _CONVERT.get(ErrorCode(error), ErrorCode(error))


def _validate(group: GroupMetadata, member_id: str, instance_id: str | None,
              generation_id: int) -> ErrorCode:
    """Kafka's validateOffsetCommit with isTransactional = true."""
    if group.is_state(GroupState.DEAD):
        return E.COORDINATOR_NOT_AVAILABLE
    if generation_id < 0 and group.is_state(GroupState.EMPTY):
        return E.NONE
    if generation_id >= 0 or member_id or instance_id is not None:
        err = group.member_error(member_id, instance_id)
        if err != E.NONE:
            return err
        return E.ILLEGAL_GENERATION if generation_id != group.generation_id else E.NONE
    return E.NONE


async def handle_txn_commit_offsets(coordinator, verifier: TransactionVerifier | None,
                                    group_id: str, transactional_id: str, producer_id: int,
                                    producer_epoch: int, member_id: str,
                                    group_instance_id: str | None, generation_id: int,
                                    offsets: dict[tuple[str, int], OffsetAndMetadata],
                                    generic_errors: bool = False, add_partition: bool = False
                                    ) -> dict[tuple[str, int], ErrorCode]:
    """See the module docstring; returns {tp: error}. `add_partition` (TxnOffsetCommit v5+
    with transaction version 2, KIP-890 part 2): the group's offsets partition is added to
    the transaction by the coordinator instead of verified."""
    def all_(error: ErrorCode) -> dict:
        return {tp: error for tp in offsets}

    err = coordinator.coordinator_error(group_id)
    if err != E.NONE:
        return all_(err)
    partition = coordinator.partition_for(group_id)
    tp_offsets = (GROUP_METADATA_TOPIC, partition)
    store = coordinator.store
    runtime = store.runtime
    guard = None
    if verifier is not None:
        try:
            guard = runtime.start_transaction_verification(
                *tp_offsets, producer_id, producer_epoch, add_partition)
        except KafkaError as e:
            return all_(convert_offset_commit_error(e.code))
        if guard is not None:
            errors = await verifier.verify(transactional_id, producer_id, producer_epoch,
                                           [tp_offsets], generic_errors, add_partition)
            if errors:
                return all_(convert_offset_commit_error(errors[tp_offsets]))
            err = coordinator.coordinator_error(group_id)
            if err != E.NONE:
                return all_(err)
    group = coordinator.groups.get(group_id) or coordinator.consumer_groups.get(group_id)
    if group is None:
        group = GroupMetadata(group_id, GroupState.EMPTY, coordinator.time_ms)
        coordinator.groups[group_id] = group
    if getattr(group, "is_consumer_group", False):  # KIP-848 group (issue 16)
        err = coordinator.consumer.validate_offset_commit(group, member_id, group_instance_id,
                                                          generation_id)
    else:
        err = _validate(group, member_id, group_instance_id, generation_id)
    if err != E.NONE:
        return all_(err)
    result, valid = coordinator.split_oversized_metadata(offsets)
    if not valid:
        return result
    builder = RecordBatchBuilder(compression_type=store.compression_type,
                                 producer_id=producer_id, producer_epoch=producer_epoch,
                                 base_sequence=0, is_transactional=True)
    now = store.time_ms()
    for tp, om in valid.items():
        key, value = offset_commit_record(group_id, tp[0], tp[1], om)
        builder.append(now, key, value)
    pending = group.pending_txn_offsets.setdefault(producer_id, {})
    previous = {tp: pending[tp] for tp in valid if tp in pending}
    pending.update(valid)  # visible to OffsetFetch(require_stable) while being written
    try:
        r = await runtime.append_batch(*tp_offsets, builder.build(), store.commit_timeout_ms,
                                       verification=guard)
        error = E(r.error)
        if r.error:
            log.info("transactional offset commit of %s (producer %d) failed: %s %s",
                     group_id, producer_id, error.name, r.error_message or "")
    except BaseException:
        _restore(group, producer_id, valid, previous)
        raise
    if error != E.NONE:
        _restore(group, producer_id, valid, previous)
    error = convert_offset_commit_error(error)
    for tp in valid:
        result[tp] = error
    return result


def _restore(group: GroupMetadata, producer_id: int, written: dict, previous: dict) -> None:
    pending = group.pending_txn_offsets.get(producer_id)
    if pending is None:
        return
    for tp in written:
        if tp in previous:
            pending[tp] = previous[tp]
        else:
            pending.pop(tp, None)
    if not pending:
        del group.pending_txn_offsets[producer_id]


def on_transaction_completed(coordinator, producer_id: int, partitions, commit: bool) -> int:
    """Apply or drop the producer's pending offsets in the groups of `partitions` (Kafka's
    handleTxnCompletion). Returns the number of groups touched."""
    wanted = set(partitions)
    touched = 0
    for group in [*coordinator.groups.values(), *coordinator.consumer_groups.values()]:
        if coordinator.partition_for(group.group_id) not in wanted:
            continue
        pending = group.pending_txn_offsets.pop(producer_id, None)
        if pending is None:
            continue
        touched += 1
        if commit and not group.is_state(GroupState.DEAD):
            group.offsets.update(pending)
    return touched


class TxnOffsetReplay:
    """Transactional offsets met while loading a `__consumer_offsets` partition (module
    docstring). `offsets` is the loader's {group: {tp: value}} of plain commits."""

    def __init__(self, offsets: dict[str, dict]) -> None:
        self.offsets = offsets
        self.positions: dict[tuple[str, tuple[str, int]], int] = {}
        self.pending: dict[int, dict[tuple[str, tuple[str, int]], tuple[int, object]]] = {}

    def note_plain(self, group_id: str, tp: tuple[str, int], offset: int) -> None:
        self.positions[(group_id, tp)] = offset

    def add(self, producer_id: int, group_id: str, tp: tuple[str, int], value,
            offset: int) -> None:
        self.pending.setdefault(producer_id, {})[(group_id, tp)] = (offset, value)

    def on_marker(self, producer_id: int, commit: bool) -> None:
        pending = self.pending.pop(producer_id, None)
        if not pending or not commit:
            return
        for (group_id, tp), (offset, value) in pending.items():
            if self.positions.get((group_id, tp), -1) < offset:
                self.offsets.setdefault(group_id, {})[tp] = value
                self.positions[(group_id, tp)] = offset

    def open_offsets(self) -> dict[str, dict[int, dict[tuple[str, int], object]]]:
        """group -> producer id -> {tp: value} of transactions without a marker yet."""
        out: dict[str, dict[int, dict]] = {}
        for pid, entries in self.pending.items():
            for (group_id, tp), (_, value) in entries.items():
                out.setdefault(group_id, {}).setdefault(pid, {})[tp] = value
        return out
