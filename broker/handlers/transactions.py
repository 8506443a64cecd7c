"""AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26): a transactional producer's
requests to its transaction coordinator (Kafka's KafkaApis + TransactionCoordinator, KIP-98).

Behaviour:
- AddPartitionsToTxn: partitions of unknown topics answer UNKNOWN_TOPIC_OR_PARTITION and the
  rest of that transaction OPERATION_NOT_ATTEMPTED; internal topics may not be added by
  clients (v0-v3: TOPIC_AUTHORIZATION_FAILED, as Kafka's filter). Otherwise every partition
  carries the coordinator's answer (NONE, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED,
  INVALID_PRODUCER_ID_MAPPING, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...). v4+ is
  the broker-to-broker form (KIP-890): several transactions per request; `verify_only`
  asks whether the partitions are in the transaction (NONE or TRANSACTION_ABORTABLE per
  partition) without adding them.
- AddOffsetsToTxn: adds the group's `__consumer_offsets` partition to the transaction.
- EndTxn: commit (`committed` true) or abort; NONE once PrepareCommit/PrepareAbort is
  written (the markers follow asynchronously), INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS,
  PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING, coordinator errors.
- Transaction version 2 (KIP-890 part 2, coordinator.transaction.versions): while
  the cluster has `transaction.version` 2 finalized, EndTxn v5 bumps the producer epoch on
  every commit and abort and answers the new producer id and epoch, and a broker's
  AddPartitionsToTxn v5 that adds partitions (the implicit add of a Produce v12+ or
  TxnOffsetCommit v5+) starts a transaction version 2 transaction.
Authorization: `authorize_transactional_id(ctx, txn_id, operation)` answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED when the broker's ACL authorizer denies WRITE (or
DESCRIBE) on the transactional id; without an authorizer everything is allowed.

Version notes: AddPartitionsToTxn v0-v5 (v3+ flexible; v2 adds PRODUCER_FENCED, older
versions get INVALID_PRODUCER_EPOCH; v4 batches transactions + top-level error_code; v5
TRANSACTION_ABORTABLE). AddOffsetsToTxn v0-v4 (v3+ flexible, v2 PRODUCER_FENCED). EndTxn
v0-v5 (v3+ flexible, v2 PRODUCER_FENCED; v5, KIP-890 part 2, returns the producer id and
epoch: the bumped ones with transaction version 2 finalized, else the unchanged ones, as
v4 ends the transaction).
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import error_code_response, handles
from coordinator.transaction.log_records import TRANSACTION_STATE_TOPIC
from coordinator.transaction.versions import (
    add_partitions_version,
    end_txn_version,
    finalized_transaction_version,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
)

__all__ = ["authorize_transactional_id", "fenced_for_version"]

ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 24, 25, 26
GROUP_METADATA_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC})
E = ErrorCode
_R = AddPartitionsToTxnResponse


def authorize_transactional_id(ctx, transactional_id: str, operation: str) -> ErrorCode | None:
    """None when allowed, else the error to answer (TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
    `operation` ("WRITE" or "DESCRIBE") on the TRANSACTIONAL_ID resource, through the
    broker's authorizer (broker.handlers.authz; everything is allowed without one)."""
    op = authz.AclOperation.WRITE if operation == "WRITE" else authz.AclOperation.DESCRIBE
    if authz.authorize(ctx, op, authz.ResourceType.TRANSACTIONAL_ID, transactional_id or "",
                       log_if_denied=operation == "WRITE"):
        return None
    return E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def fenced_for_version(error: ErrorCode, version: int, fenced_since: int) -> ErrorCode:
    """Clients older than `fenced_since` do not know PRODUCER_FENCED: they get
    INVALID_PRODUCER_EPOCH (Kafka's handlers do the same)."""
    if error == E.PRODUCER_FENCED and version < fenced_since:
        return E.INVALID_PRODUCER_EPOCH
    return error


def _coordinator(ctx):
    return getattr(ctx.broker, "transaction_coordinator", None)


# --- AddPartitionsToTxn -----------------------------------------------------------------------
def _transactions(req, version: int):
    """[(txn_id, pid, epoch, verify_only, [(topic, p)])] in request order."""
    if version < 4:
        tps = [(t.name, p) for t in req.v3_and_below_topics or () for p in t.partitions]
        return [(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                 req.v3_and_below_producer_epoch, False, tps)]
    return [(t.transactional_id, t.producer_id, t.producer_epoch, t.verify_only,
             [(tp.name, p) for tp in t.topics for p in tp.partitions])
            for t in req.transactions or ()]


def _topic_results(errors: dict[tuple[str, int], ErrorCode]) -> list:
    by_topic: dict[str, list] = {}
    for (topic, p), e in errors.items():
        by_topic.setdefault(topic, []).append(
            _R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=e))
    return [_R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=rs)
            for t, rs in by_topic.items()]


def _response(version: int, results: list[tuple[str, dict]], top_error: ErrorCode = E.NONE):
    if version < 4:
        errors = results[0][1] if results else {}
        return _R(results_by_topic_v3_and_below=_topic_results(errors))
    return _R(error_code=top_error, results_by_transaction=[
        _R.AddPartitionsToTxnResult(transactional_id=tid, topic_results=_topic_results(errs))
        for tid, errs in results])


def add_partitions_error_response(req, version: int, error: KafkaError):
    results = [(tid, {tp: error.code for tp in tps})
               for tid, _, _, _, tps in _transactions(req, version)]
    return _response(version, results, error.code if version >= 4 else E.NONE)


async def _one_transaction(ctx, version: int, txn_id, pid: int, epoch: int,
                           verify_only: bool, tps: list) -> dict:
    if txn_id is None:
        raise KafkaError(E.INVALID_REQUEST, "Transactional ID can not be null in request.")
    if version < 4:
        denied = authorize_transactional_id(ctx, txn_id, "WRITE")
        if denied is not None:
            return {tp: denied for tp in tps}
    cache = ctx.broker.metadata_cache
    errors: dict[tuple[str, int], ErrorCode] = {}
    no_write = authz.unauthorized(ctx, authz.AclOperation.WRITE, authz.ResourceType.TOPIC,
                                  {tp[0] for tp in tps if tp[0] not in INTERNAL_TOPICS}) \
        if version < 4 else set()
    for tp in tps:
        if version < 4 and (tp[0] in INTERNAL_TOPICS or tp[0] in no_write):
            errors[tp] = E.TOPIC_AUTHORIZATION_FAILED
        elif not cache.contains_partition(*tp):
            errors[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
    if errors:
        return {tp: errors.get(tp, E.OPERATION_NOT_ATTEMPTED) for tp in tps}
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {tp: E.COORDINATOR_NOT_AVAILABLE for tp in tps}
    if verify_only:
        return coordinator.handle_verify_partitions(txn_id, pid, epoch, set(tps))
    tv = add_partitions_version(version, verify_only, finalized_transaction_version(ctx.broker))
    error = await coordinator.handle_add_partitions(txn_id, pid, epoch, set(tps), tv)
    error = fenced_for_version(error, version, 2)
    return {tp: error for tp in tps}


@handles(ADD_PARTITIONS_TO_TXN, 0, 5, error_response=add_partitions_error_response)
async def handle_add_partitions_to_txn(ctx, req: AddPartitionsToTxnRequest):
    version = ctx.api_version
    if version >= 4:  # brokers verifying partitions (KIP-890): CLUSTER_ACTION on the cluster
        authz.require_cluster(ctx, authz.AclOperation.CLUSTER_ACTION)
    results = []
    for txn_id, pid, epoch, verify_only, tps in _transactions(req, version):
        results.append((txn_id, await _one_transaction(ctx, version, txn_id, pid, epoch,
                                                       verify_only, tps)))
    return _response(version, results)


# --- AddOffsetsToTxn --------------------------------------------------------------------------
add_offsets_error_response = error_code_response(AddOffsetsToTxnResponse)


@handles(ADD_OFFSETS_TO_TXN, 0, 4, error_response=add_offsets_error_response)
async def handle_add_offsets_to_txn(ctx, req: AddOffsetsToTxnRequest):
    denied = authorize_transactional_id(ctx, req.transactional_id, "WRITE")
    if denied is not None:
        return AddOffsetsToTxnResponse(error_code=denied)
    if not authz.authorize(ctx, authz.AclOperation.READ, authz.ResourceType.GROUP,
                           req.group_id):
        return AddOffsetsToTxnResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)
    coordinator = _coordinator(ctx)
    groups = ctx.broker.group_coordinator
    if coordinator is None or groups is None:
        return AddOffsetsToTxnResponse(error_code=E.COORDINATOR_NOT_AVAILABLE)
    tp = (GROUP_METADATA_TOPIC, groups.partition_for(req.group_id))
    error = await coordinator.handle_add_partitions(req.transactional_id, req.producer_id,
                                                    req.producer_epoch, {tp}, 0)
    return AddOffsetsToTxnResponse(error_code=fenced_for_version(error, ctx.api_version, 2))


# --- EndTxn -----------------------------------------------------------------------------------
end_txn_error_response = error_code_response(EndTxnResponse, producer_id=-1, producer_epoch=-1)


@handles(END_TXN, 0, 5, error_response=end_txn_error_response)
async def handle_end_txn(ctx, req: EndTxnRequest):
    denied = authorize_transactional_id(ctx, req.transactional_id, "WRITE")
    if denied is not None:
        return EndTxnResponse(error_code=denied, producer_id=-1, producer_epoch=-1)
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return EndTxnResponse(error_code=E.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                              producer_epoch=-1)
    tv = end_txn_version(ctx.api_version, finalized_transaction_version(ctx.broker))
    error, pid, epoch = await coordinator.handle_end_transaction(
        req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed), tv)
    return EndTxnResponse(error_code=fenced_for_version(error, ctx.api_version, 2),
                          producer_id=pid, producer_epoch=epoch)
