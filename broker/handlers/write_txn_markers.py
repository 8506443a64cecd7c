"""WriteTxnMarkers (27): a transaction coordinator asks this partition leader to write COMMIT
or ABORT markers (Kafka's handleWriteTxnMarkersRequest, KIP-98).

Behaviour: every marker's partitions get a control batch (acks=-1, origin "coordinator");
per producer id and partition the answer is NONE, UNKNOWN_TOPIC_OR_PARTITION (not hosted
here), NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), INVALID_PRODUCER_EPOCH
(an older producer epoch than the partition knows), TRANSACTION_COORDINATOR_FENCED (an
older coordinator epoch), KAFKA_STORAGE_ERROR. Committed/aborted transactional offsets of
`__consumer_offsets` partitions are applied/dropped once their markers are written. The
work is `broker.txn_markers.write_txn_markers`, shared with the
coordinator's local shortcut. Only brokers send it (Kafka checks CLUSTER_ACTION; issue 15).

Version notes: v0-v1 (v1 flexible).
Authorization: ALTER or CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import handles
from broker.txn_markers import write_txn_markers
from protocol.errors import KafkaError
from protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

WRITE_TXN_MARKERS = 27
_R = WriteTxnMarkersResponse


def _response(errors: dict[int, dict[tuple[str, int], int]]) -> WriteTxnMarkersResponse:
    markers = []
    for pid, by_tp in errors.items():
        topics: dict[str, list] = {}
        for (topic, p), e in by_tp.items():
            topics.setdefault(topic, []).append(
                _R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=int(e)))
        markers.append(_R.WritableTxnMarkerResult(producer_id=pid, topics=[
            _R.WritableTxnMarkerTopicResult(name=t, partitions=ps) for t, ps in topics.items()]))
    return _R(markers=markers)


def error_response(req: WriteTxnMarkersRequest, version: int, error: KafkaError):
    return _response({m.producer_id: {(t.name, p): error.code for t in m.topics
                                      for p in t.partition_indexes} for m in req.markers})


@handles(WRITE_TXN_MARKERS, 0, 1, error_response=error_response)
async def handle_write_txn_markers(ctx, req: WriteTxnMarkersRequest):
    # Kafka: ALTER on the cluster (logged only when denied too), else CLUSTER_ACTION
    if not authz.authorize_cluster(ctx, authz.AclOperation.ALTER, log_if_denied=False):
        authz.require_cluster(ctx, authz.AclOperation.CLUSTER_ACTION)
    if not req.markers:
        return _R(markers=[])
    return _response(await write_txn_markers(ctx.broker, req.markers))
