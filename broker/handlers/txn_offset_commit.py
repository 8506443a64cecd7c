"""TxnOffsetCommit (28): a transactional producer commits a consumer group's offsets inside
its transaction (KIP-98; KIP-447 adds the group generation / member id / instance id).

Behaviour (Kafka's handleTxnOffsetCommitRequest): partitions of unknown topics answer
UNKNOWN_TOPIC_OR_PARTITION; the rest go to `coordinator.group.txn_offsets`
(coordinator errors, member/generation checks with UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
FENCED_INSTANCE_ID, OFFSET_METADATA_TOO_LARGE, INVALID_PRODUCER_EPOCH for a fenced producer,
KIP-890 verification of the group's `__consumer_offsets` partition). The offsets become
visible to OffsetFetch when the transaction commits; an abort drops them.
Authorization (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) via
`broker.handlers.transactions.authorize_transactional_id`.

Version notes: v0-v5 (v3+ flexible). v2 adds committed_leader_epoch; v3 generation_id,
member_id, group_instance_id (KIP-447); v4 TRANSACTION_ABORTABLE (errors of the KIP-890
verification keep their generic form instead of INVALID_TXN_STATE); v5 is v4 plus, with
`transaction.version` 2 finalized, the implicit AddOffsetsToTxn of KIP-890 part 2 (the
group's offsets partition is added to the transaction; the client sends no
AddOffsetsToTxn).
"""

from __future__ import annotations

import time

from broker.handlers import authz
from broker.handlers.registry import handles
from broker.handlers.transactions import authorize_transactional_id
from coordinator.group.group import OffsetAndMetadata
from coordinator.group.txn_offsets import handle_txn_commit_offsets
from coordinator.transaction.versions import (
    finalized_transaction_version,
    txn_offset_commit_adds_partition,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse

TXN_OFFSET_COMMIT = 28
_R = TxnOffsetCommitResponse


def _response(req: TxnOffsetCommitRequest, errors: dict[tuple[str, int], int]):
    return _R(topics=[_R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
        _R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                            error_code=int(errors[(t.name, p.partition_index)]))
        for p in t.partitions]) for t in req.topics])


def error_response(req: TxnOffsetCommitRequest, version: int, error: KafkaError):
    return _response(req, {(t.name, p.partition_index): error.code for t in req.topics
                           for p in t.partitions})


@handles(TXN_OFFSET_COMMIT, 0, 5, error_response=error_response)
async def handle_txn_offset_commit(ctx, req: TxnOffsetCommitRequest):
    version = ctx.api_version
    errors: dict[tuple[str, int], int] = {}
    denied = authorize_transactional_id(ctx, req.transactional_id, "WRITE")
    if denied is not None:
        return error_response(req, version, KafkaError(denied))
    if not authz.authorize(ctx, authz.AclOperation.READ, authz.ResourceType.GROUP,
                           req.group_id):
        return error_response(req, version, KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    no_read = authz.unauthorized(ctx, authz.AclOperation.READ, authz.ResourceType.TOPIC,
                                 (t.name for t in req.topics))
    cache = ctx.broker.metadata_cache
    now = int(time.time() * 1000)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    for t in req.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if t.name in no_read:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if not cache.contains_partition(*tp):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offsets[tp] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if version >= 2 else -1,
                metadata=p.committed_metadata if p.committed_metadata is not None else "",
                commit_timestamp=now, expire_timestamp=-1)
    groups = ctx.broker.group_coordinator
    if offsets:
        if groups is None:
            errors.update({tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in offsets})
        else:
            v3 = version >= 3
            errors.update(await handle_txn_commit_offsets(
                groups, getattr(ctx.broker, "transaction_verifier", None), req.group_id,
                req.transactional_id, req.producer_id, req.producer_epoch,
                req.member_id if v3 else "", req.group_instance_id if v3 else None,
                req.generation_id if v3 else -1, offsets, generic_errors=version >= 4,
                add_partition=txn_offset_commit_adds_partition(
                    version, finalized_transaction_version(ctx.broker))))
    return _response(req, errors)
