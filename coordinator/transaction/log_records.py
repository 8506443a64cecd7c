"""`__transaction_state` records (Kafka's TransactionLog): key TransactionLogKey v0
(`int16 0 | string transactional_id`), value TransactionLogValue v0 (`int16 0 | producer_id
int64 | producer_epoch int16 | timeout int32 | status int8 | partitions [topic string,
[int32]] (null when Empty) | last_update_ms int64 | start_ms int64`), a null value = the
transactional id expired (a tombstone). Josef writes value version 0 for transactions of
transaction version 0/1 (as a ZooKeeper-mode Kafka does) and version 1 for transaction
version 2 ones (KIP-890 part 2), whose tagged fields keep what a reloading coordinator needs:
PreviousProducerId (tag 0), NextProducerId (tag 1), ClientTransactionVersion (tag 2). It
reads versions 0 and 1. Records go uncompressed (`TransactionLog.EnforcedCompression`)
with acks=-1.

Schemas: ../shared/kafka-protocol/coordinator-records{,-4.2}/TransactionLog{Key,Value}.json.
"""

from __future__ import annotations

from coordinator.transaction.metadata import (
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from protocol.coordinator_records import decode_transaction_key, encode_key, encode_value
from protocol.errors import KafkaError
from protocol.messages import MESSAGES

__all__ = ["TRANSACTION_STATE_TOPIC", "key_bytes", "value_bytes", "decode_record",
           "format_record", "VALUE_VERSION"]

TRANSACTION_STATE_TOPIC = "__transaction_state"
VALUE_VERSION = 0
TV2_VALUE_VERSION = 1
_Key = MESSAGES["TransactionLogKey"]
_Value = MESSAGES["TransactionLogValue"]


def key_bytes(transactional_id: str) -> bytes:
    return encode_key(_Key(transactional_id=transactional_id), 0)


def value_bytes(t: TxnTransitMetadata) -> bytes:
    """The record of a transition (Kafka's valueToBytes: no partitions while Empty)."""
    if t.txn_state == TransactionState.EMPTY and t.topic_partitions:
        raise ValueError(f"an Empty transaction has no partitions: {t}")
    partitions = None
    if t.txn_state != TransactionState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(t.topic_partitions):
            by_topic.setdefault(topic, []).append(p)
        partitions = [_Value.PartitionsSchema(topic=topic, partition_ids=ids)
                      for topic, ids in by_topic.items()]
    tv2 = t.client_transaction_version >= 2
    return encode_value(_Value(
        producer_id=t.producer_id, producer_epoch=t.producer_epoch,
        transaction_timeout_ms=t.txn_timeout_ms, transaction_status=t.txn_state.id,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=t.txn_last_update_timestamp,
        transaction_start_timestamp_ms=t.txn_start_timestamp,
        previous_producer_id=t.prev_producer_id, next_producer_id=t.next_producer_id,
        client_transaction_version=t.client_transaction_version),
        TV2_VALUE_VERSION if tv2 else VALUE_VERSION)


def decode_record(key: bytes | None, value: bytes | None
                  ) -> tuple[str, TransactionMetadata | None]:
    """(transactional id, metadata or None for a tombstone); KafkaError / ValueError for a
    record that cannot be read (the loader logs and skips it)."""
    if key is None:
        raise ValueError("transaction state record without a key")
    txn_id = decode_transaction_key(key).transactional_id
    if value is None:
        return txn_id, None
    version = int.from_bytes(bytes(value[:2]), "big", signed=True)
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version}")
    v = _Value.decode(value, version, 2)
    state = TransactionState.from_id(v.transaction_status)
    md = TransactionMetadata(
        txn_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, state,
        previous_producer_id=v.previous_producer_id if version >= 1 else -1,
        txn_start_timestamp=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp=v.transaction_last_update_timestamp_ms,
        next_producer_id=v.next_producer_id if version >= 1 else -1,
        client_transaction_version=v.client_transaction_version if version >= 1 else 0)
    if state != TransactionState.EMPTY:
        for ps in v.transaction_partitions or ():
            md.topic_partitions.update((ps.topic, p) for p in ps.partition_ids)
    return txn_id, md


def format_record(key, value) -> tuple[str, str]:
    """kafka-dump-log's `--transaction-log-decoder` text for one record (key, value)."""
    try:
        txn_id, md = decode_record(key, value)
    except (KafkaError, ValueError) as e:
        return "unknown", f"<unreadable: {e}>"
    key_text = f"transaction_metadata::transactionalId={txn_id}"
    if md is None:
        return key_text, "<DELETE>"
    parts = ",".join(f"{t}-{p}" for t, p in sorted(md.topic_partitions))
    return key_text, (f"producerId:{md.producer_id},producerEpoch:{md.producer_epoch},"
                      f"state={md.state},partitions=[{parts}],"
                      f"txnLastUpdateTimestamp={md.txn_last_update_timestamp},"
                      f"txnTimeoutMs={md.txn_timeout_ms}")
