"""Transaction versions (KIP-890, Kafka's ``TransactionVersion`` and the finalized
``transaction.version`` feature, KIP-584).

- TV 0 / 1: the KIP-98 protocol (1 adds KIP-890 part 1's verification and the client's new
  error codes; the coordinator behaves the same for both).
- TV 2 (KIP-890 part 2): every EndTxn (v5+) bumps the producer epoch and answers the new
  producer id and epoch; a transactional Produce (v12+) or TxnOffsetCommit (v5+) adds its
  partition to the transaction itself (the partition leader asks the coordinator, as Kafka's
  AddPartitionsToTxnManager with the ``addPartition`` operation), so the client sends no
  AddPartitionsToTxn / AddOffsetsToTxn; markers are written with the bumped epoch, which
  fences a zombie's late write of the ended transaction.

A request gets TV 2 only while the cluster has ``transaction.version`` >= 2 finalized
(UpdateFeatures, ``josef features``); until then every version of these APIs behaves as
before, whatever the client sends. A transaction keeps the version it was driven with
(``TransactionMetadata.client_transaction_version``, persisted in ``TransactionLogValue``
v1's tagged ``ClientTransactionVersion``), so a coordinator failover or a downgrade of the
feature leaves a TV 2 transaction a TV 2 transaction until it completes.
"""

from __future__ import annotations

__all__ = ["FEATURE", "TV_0", "TV_2", "finalized_transaction_version", "supports_epoch_bump",
           "end_txn_version", "add_partitions_version", "produce_adds_partitions",
           "txn_offset_commit_adds_partition"]

FEATURE = "transaction.version"
TV_0, TV_1, TV_2 = 0, 1, 2


def finalized_transaction_version(services) -> int:
    """The cluster's finalized ``transaction.version`` (0 when not finalized or unknown)."""
    controller = getattr(services, "controller", None)
    if controller is None:
        return TV_0
    try:
        _, levels = controller.finalized_features()
    except Exception:  # noqa: BLE001 - an unreadable feature store means the old behaviour
        return TV_0
    return int(levels.get(FEATURE, TV_0))


def supports_epoch_bump(tv: int) -> bool:
    return tv >= TV_2


def end_txn_version(request_version: int, finalized: int) -> int:
    """EndTxn v5+ with TV 2 finalized is a TV 2 end (Kafka's transactionVersionForEndTxn)."""
    return TV_2 if request_version >= 5 and finalized >= TV_2 else TV_0


def add_partitions_version(request_version: int, verify_only: bool, finalized: int) -> int:
    """A broker's AddPartitionsToTxn v5 that adds (not just verifies) partitions is the TV 2
    implicit add of a Produce / TxnOffsetCommit (transactionVersionForAddPartitionsToTxn)."""
    return TV_2 if request_version >= 5 and not verify_only and finalized >= TV_2 else TV_0


def produce_adds_partitions(produce_version: int, finalized: int) -> bool:
    """Produce v12+ adds partitions implicitly (AddPartitionsToTxnManager's
    produceRequestVersionToTransactionSupportedOperation: ``addPartition``)."""
    return produce_version >= 12 and finalized >= TV_2


def txn_offset_commit_adds_partition(version: int, finalized: int) -> bool:
    """TxnOffsetCommit v5+ adds the group's offsets partition implicitly."""
    return version >= 5 and finalized >= TV_2
