"""Writing transaction markers on a partition leader (the work behind WriteTxnMarkers; Kafka's
`KafkaApis.handleWriteTxnMarkersRequest`).

`await write_txn_markers(services, markers) -> {producer_id: {(topic, p): ErrorCode}}` for
`WriteTxnMarkersRequest.WritableTxnMarker`-shaped markers (producer id/epoch, COMMIT when
`transaction_result` is true, coordinator epoch, topics). Per marker, a COMMIT/ABORT control
batch goes to each partition with acks=-1 and origin "coordinator" (the leader's producer
state fences older producer epochs, INVALID_PRODUCER_EPOCH, and older coordinators,
TRANSACTION_COORDINATOR_FENCED); a partition this broker does not host answers
UNKNOWN_TOPIC_OR_PARTITION, one it does not lead NOT_LEADER_OR_FOLLOWER. After the markers
of a marker entry are written, the group coordinator applies (COMMIT) or drops (ABORT) the
producer's pending transactional offsets of the `__consumer_offsets` partitions that
succeeded (`coordinator.group.txn_offsets.on_transaction_completed`).

Used both by the WriteTxnMarkers handler and by this broker's own marker channel (its local
shortcut), so both paths behave the same.
"""

from __future__ import annotations

import asyncio
import logging
import time

from coordinator.group.group_store import GROUP_METADATA_TOPIC
from protocol.errors import ErrorCode
from protocol.record_builder import build_control_batch

__all__ = ["write_txn_markers"]

log = logging.getLogger(__name__)


async def _write_one(services, marker, timeout_ms: int) -> dict[tuple[str, int], ErrorCode]:
    rm = services.replica_manager
    errors: dict[tuple[str, int], ErrorCode] = {}
    entries = {}
    now = int(time.time() * 1000)
    kind = "commit" if marker.transaction_result else "abort"
    for t in marker.topics:
        for p in t.partition_indexes:
            tp = (t.name, p)
            if rm is None or rm.get_partition(*tp) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            entries[tp] = memoryview(bytearray(build_control_batch(
                kind, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                now)))
    if entries:
        result = rm.append_records(timeout_ms, -1, entries, origin="coordinator")
        if isinstance(result, asyncio.Future):
            result = await result
        for tp, r in result.items():
            errors[tp] = ErrorCode(r.error)
            if r.error:
                log.info("writing the %s marker of producer %d to %s-%d failed: %s %s", kind,
                         marker.producer_id, tp[0], tp[1], ErrorCode(r.error).name,
                         r.error_message or "")
    offsets_partitions = [tp[1] for tp, e in errors.items()
                          if tp[0] == GROUP_METADATA_TOPIC and e == ErrorCode.NONE]
    coordinator = getattr(services, "group_coordinator", None)
    if offsets_partitions and coordinator is not None:
        from coordinator.group.txn_offsets import on_transaction_completed
        try:
            on_transaction_completed(coordinator, marker.producer_id, offsets_partitions,
                                     bool(marker.transaction_result))
        except Exception:  # noqa: BLE001 - Kafka answers UNKNOWN_SERVER_ERROR for them
            log.exception("completing the transactional offsets of producer %d failed",
                          marker.producer_id)
            for p in offsets_partitions:
                errors[(GROUP_METADATA_TOPIC, p)] = ErrorCode.UNKNOWN_SERVER_ERROR
    return errors


async def write_txn_markers(services, markers) -> dict[int, dict[tuple[str, int], ErrorCode]]:
    """See the module docstring; markers are written concurrently, answers merged per
    producer id."""
    timeout_ms = services.config.get("request.timeout.ms") if services.config else 30000
    results = await asyncio.gather(*(_write_one(services, m, timeout_ms) for m in markers))
    out: dict[int, dict[tuple[str, int], ErrorCode]] = {}
    for m, errors in zip(markers, results, strict=True):
        out.setdefault(m.producer_id, {}).update(errors)
    return out
