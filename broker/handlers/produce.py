# Behaviour: Produce (api key 0) appends each partition's record batches to its leader log
#   through ReplicaManager.append_records. acks=1 answers after the local append, acks=-1
#   once the high watermark covers the batch (a DelayedProduce; immediate with ISR {self}),
#   acks=0 sends no response at all - and closes the connection if any partition failed, as
#   Kafka does (the client cannot learn of the error otherwise). Other acks values answer
#   INVALID_REQUIRED_ACKS for every partition. Errors are per partition:
#   UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, CORRUPT_MESSAGE (bad CRC / torn batch),
#   MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD, INVALID_TIMESTAMP (a record's
#   timestamp outside message.timestamp.before/after.max.ms, CreateTime topics); a keyless
#   record on a compacted topic or an out-of-range timestamp fails the whole batch and names
#   the records in `record_errors` (v8+, KIP-467, with Kafka's summary `error_message`), and for
#   idempotent producers OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH; a retried
#   duplicate of one of the producer's last 5 batches answers NONE with the original base
#   offset (Kafka's DUPLICATE_SEQUENCE_NUMBER handling). Produce never creates topics.
#   Transactional batches (KIP-98): with transaction.partition.verification.enable (KIP-890
#   part 1) a batch that would start the producer's transaction on a partition is first
#   checked with the transaction coordinator (broker.txn_verification):
#   INVALID_TXN_STATE when the partition was not added to the transaction (v11:
#   TRANSACTION_ABORTABLE), NOT_ENOUGH_REPLICAS (retriable) when the coordinator could not be
#   asked, INVALID_PRODUCER_EPOCH when fenced; a non-transactional batch inside the
#   producer's open transaction is INVALID_TXN_STATE. Authorization of the transactional id:
#   broker.handlers.transactions.authorize_transactional_id (issue 15).
#   Authorization (with an authorizer): a request with a transactional id needs WRITE on that
#   TRANSACTIONAL_ID (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition); each
#   topic needs WRITE (else TOPIC_AUTHORIZATION_FAILED for its partitions, nothing appended).
#   Record bytes are never copied: the request frame is a writable memoryview and the log
#   patches base offset / leader epoch in place; validation is per batch (header + CRC).
# Version notes: v0-v2 may carry magic 0/1 message sets (kcat's legacy mode), up-converted to
#   one v2 batch (protocol.legacy_records.convert_to_v2); v3+ must carry exactly one magic-2
#   batch per partition (else INVALID_RECORD) and add transactional_id; v2+ log_append_time,
#   v5+ log_start_offset, v8+ record_errors/error_message, v9+ flexible, v10+ current_leader
#   (tagged, left default), v11 same as v10 (KIP-951 client side); v11+ answers
#   TRANSACTION_ABORTABLE where older versions get INVALID_TXN_STATE (KIP-890 part 1). v12 is
#   v11 plus, once `transaction.version` 2 is finalized, the implicit AddPartitionsToTxn of
#   KIP-890 part 2 (a transactional batch adds its partition to the producer's transaction;
#   broker.txn_verification). v13 names topics by topic id (KIP-516): an
#   id this broker does not know answers UNKNOWN_TOPIC_ID for its partitions, and the
#   response carries the ids.

from __future__ import annotations

import asyncio
import struct

from broker.handlers import authz, throttling
from broker.handlers.registry import CLOSE_CONNECTION, NO_RESPONSE, handles, then
from broker.handlers.transactions import authorize_transactional_id
from broker.metrics import TOPIC_STATS
from broker.replica_manager import ProducePartitionResult
from broker.txn_verification import verify_produce
from coordinator.transaction.versions import (
    finalized_transaction_version,
    produce_adds_partitions,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.legacy_records import convert_to_v2
from protocol.messages import ProduceRequest, ProduceResponse

API_KEY = 0
MIN_VERSION, MAX_VERSION = 0, 13
TOPIC_ID_VERSION = 13

_LENGTH = struct.Struct(">i")
MAGIC_OFFSET = 16
MIN_BATCH_SIZE = 61

_TopicResp = ProduceResponse.TopicProduceResponse
_PartResp = ProduceResponse.PartitionProduceResponse
_RecordError = ProduceResponse.BatchIndexAndErrorMessage


def _prepare(records, version: int):
    """Check a partition's records before the append; returns the buffer to append (the
    frame's memoryview, or an up-converted bytearray) or raises KafkaError."""
    if records is None or len(records) == 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, "produce request without record batches")
    if len(records) <= MAGIC_OFFSET:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{len(records)} bytes is not a batch")
    magic = records[MAGIC_OFFSET]
    if magic < 2:
        if version >= 3:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"produce v{version} requires magic 2 batches, got magic {magic}")
        try:
            converted = convert_to_v2(records)
        except (ValueError, IndexError, struct.error) as e:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"malformed message set: {e}") from e
        if not converted:
            raise KafkaError(ErrorCode.INVALID_RECORD, "empty message set")
        return bytearray(converted)
    if len(records) < MIN_BATCH_SIZE:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{len(records)} bytes is not a batch")
    if version >= 3 and _LENGTH.unpack_from(records, 8)[0] + 12 != len(records):
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"produce v{version} must carry exactly one record batch")
    return records


def _resolve_topic_ids(ctx, req: ProduceRequest, failed: dict) -> None:
    """v13+: fill each topic's name from its id (the response is keyed by id again); an
    unknown id answers UNKNOWN_TOPIC_ID for its partitions, keyed by the id's text."""
    cache = ctx.broker.metadata_cache
    for t in req.topic_data:
        name = cache.topic_name(t.topic_id)
        if name is None:
            t.name = str(t.topic_id)
            for p in t.partition_data:
                failed[(t.name, p.index)] = ProducePartitionResult(ErrorCode.UNKNOWN_TOPIC_ID)
        else:
            t.name = name


def _response(req: ProduceRequest, results: dict) -> ProduceResponse:
    topics = []
    for t in req.topic_data:
        name = t.name
        parts = []
        for p in t.partition_data:
            r = results.get((name, p.index))
            if r is None:
                continue
            parts.append(_PartResp(index=p.index, error_code=r.error, base_offset=r.base_offset,
                                   log_append_time_ms=r.log_append_time,
                                   log_start_offset=r.log_start_offset,
                                   error_message=r.error_message if r.error else None,
                                   record_errors=[_RecordError(batch_index=i,
                                                               batch_index_error_message=m)
                                                  for i, m in r.record_errors]))
        topics.append(_TopicResp(name=name, topic_id=t.topic_id, partition_responses=parts))
    return ProduceResponse(responses=topics)


def error_response(req: ProduceRequest, version: int, error: KafkaError) -> ProduceResponse:
    """Every partition of the request answers `error.code` (Kafka's getErrorResponse)."""
    return ProduceResponse(responses=[
        _TopicResp(name=t.name, topic_id=t.topic_id, partition_responses=[
            _PartResp(index=p.index, error_code=error.code, base_offset=-1,
                      log_append_time_ms=-1, log_start_offset=-1,
                      error_message=error.message)
            for p in t.partition_data])
        for t in req.topic_data])


@handles(API_KEY, MIN_VERSION, MAX_VERSION, error_response=error_response)
def handle_produce(ctx, req: ProduceRequest):
    version = ctx.api_version
    acks = req.acks
    entries: dict = {}
    failed: dict = {}
    denied: set[str] = set()
    if version >= TOPIC_ID_VERSION:
        _resolve_topic_ids(ctx, req, failed)
    if authz.enabled(ctx):
        if req.transactional_id is not None and not authz.authorize(
                ctx, authz.AclOperation.WRITE, authz.ResourceType.TRANSACTIONAL_ID,
                req.transactional_id):
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)
        denied = authz.unauthorized(ctx, authz.AclOperation.WRITE, authz.ResourceType.TOPIC,
                                    (t.name for t in req.topic_data))
    for t in req.topic_data:
        name = t.name
        for p in t.partition_data:
            tp = (name, p.index)
            if tp in failed:
                continue
            if name in denied:
                failed[tp] = ProducePartitionResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            try:
                entries[tp] = _prepare(p.records, version)
            except KafkaError as e:
                failed[tp] = ProducePartitionResult(e.code, error_message=e.message)
    throttle_ms = throttling.produce(ctx, getattr(ctx, "request_size", 0))  # KIP-219
    if throttle_ms:
        throttling.throttle(ctx, throttle_ms)
    if entries and version >= 3 and req.transactional_id is not None:
        return _produce_transactional(ctx, req, acks, entries, failed, throttle_ms)
    results = ctx.broker.replica_manager.append_records(req.timeout_ms, acks, entries) \
        if entries else {}

    def finish(res: dict):
        if failed:
            res = {**res, **failed}
        TOPIC_STATS.record_produce(entries, res)
        return _finish(req, acks, res, throttle_ms)

    return then(results, finish)


async def _produce_transactional(ctx, req: ProduceRequest, acks: int, entries: dict,
                                 failed: dict, throttle_ms: int = 0):
    """Transactional produce: authorization, KIP-890 verification, then the append with
    the verification guards."""
    denied = authorize_transactional_id(ctx, req.transactional_id, "WRITE")
    if denied is not None:
        return _finish(req, acks, throttle_ms=throttle_ms,
                       results={**failed, **{tp: ProducePartitionResult(denied)
                                                for tp in entries}})
    add = produce_adds_partitions(ctx.api_version, finalized_transaction_version(ctx.broker))
    guards, rejected = await verify_produce(ctx.broker, req.transactional_id, entries,
                                            generic_errors=ctx.api_version > 10, add=add)
    for tp, (code, message) in rejected.items():
        entries.pop(tp, None)
        failed[tp] = ProducePartitionResult(code, error_message=message)
    results = ctx.broker.replica_manager.append_records(
        req.timeout_ms, acks, entries, verification_guards=guards) if entries else {}
    if isinstance(results, asyncio.Future):
        results = await results
    res = {**results, **failed}
    TOPIC_STATS.record_produce(entries, res)
    return _finish(req, acks, res, throttle_ms)


def _finish(req: ProduceRequest, acks: int, results: dict, throttle_ms: int = 0):
    if acks == 0:
        for r in results.values():
            if r.error:
                return CLOSE_CONNECTION
        return NO_RESPONSE
    response = _response(req, results)
    response.throttle_time_ms = throttle_ms
    return response
