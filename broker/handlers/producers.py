"""DescribeProducers (61): the active idempotent/transactional producers of partitions.

Behaviour (KIP-664; Kafka's ``KafkaApis.handleDescribeProducersRequest`` and
``Partition.activeProducerState``):

- Per topic: an illegal name -> INVALID_TOPIC_EXCEPTION (17); a topic the cluster does not
  know -> UNKNOWN_TOPIC_OR_PARTITION (3) for each requested partition.
- Per partition: unknown partition -> UNKNOWN_TOPIC_OR_PARTITION (3); known to the cluster but
  not hosted by this broker (or its log still being created) -> NOT_LEADER_OR_FOLLOWER (6).
  Any replica hosting the log answers, the leader or a follower, as in Kafka: that is what
  the admin client's ``DescribeProducersOptions.brokerId`` is for (checking a follower's
  state); without it the client sends each partition to its leader.
- Each active producer (one entry of the log's ``ProducerStateManager``, ordered by producer
  id): ``producer_id``, ``producer_epoch``, ``last_sequence`` (-1 when the entry holds no
  batch, e.g. only transaction markers), ``last_timestamp`` (ms, max timestamp of its last
  batch or marker, -1 if none), ``coordinator_epoch`` (of its last transaction marker, -1
  when none), ``current_txn_start_offset`` (first offset of its open transaction, -1 when
  none).
- The partitions of a topic are answered in request order; a repeated index is answered
  twice, as Kafka does.

Version notes: v0 only (flexible). Without READ on a topic (with an authorizer)
its partitions answer TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import handles
from controller.admin_validation import validate_topic_name
from protocol import api
from protocol.errors import ErrorCode, KafkaError

DESCRIBE_PRODUCERS = 61
DescribeProducersResponse = api.API_KEYS[DESCRIBE_PRODUCERS].response_cls
PartitionResponse = DescribeProducersResponse.PartitionResponse
ProducerState = DescribeProducersResponse.ProducerState

NO_VALUE = -1


def _error_partition(index: int, error: KafkaError) -> PartitionResponse:
    return PartitionResponse(partition_index=index, error_code=int(error.code),
                             error_message=error.message, active_producers=[])


def describe_producers_error_response(request, version: int, error: KafkaError):
    return DescribeProducersResponse(topics=[
        DescribeProducersResponse.TopicResponse(name=t.name, partitions=[
            _error_partition(p, error) for p in t.partition_indexes])
        for t in request.topics])


def active_producers(producer_state) -> list[ProducerState]:
    """The entries of a ``storage.producer_state.ProducerStateManager`` as
    DescribeProducers ``ProducerState`` rows, by producer id."""
    rows = []
    for pid in sorted(producer_state.producers):
        e = producer_state.producers[pid]
        txn = e.current_txn_first_offset
        rows.append(ProducerState(
            producer_id=pid, producer_epoch=e.producer_epoch, last_sequence=e.last_seq,
            last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
            current_txn_start_offset=NO_VALUE if txn is None else txn))
    return rows


def describe_partition(replica_manager, topic: str, index: int) -> PartitionResponse:
    """One partition's answer; errors as in the module docstring."""
    try:
        p = replica_manager.get_partition_or_error(topic, index)
        if p.log is None or p.deleted:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"{topic}-{index} has no local log on this broker")
    except KafkaError as e:
        return _error_partition(index, e)
    return PartitionResponse(partition_index=index, error_code=0, error_message=None,
                             active_producers=active_producers(p.log.producer_state))


def _topic_error(name: str) -> KafkaError | None:
    """INVALID_TOPIC_EXCEPTION for an illegal name (unknown topics are answered per
    partition by ``ReplicaManager.get_partition_or_error``)."""
    try:
        validate_topic_name(name)
    except KafkaError as e:
        return e
    return None


@handles(DESCRIBE_PRODUCERS, 0, 0, error_response=describe_producers_error_response)
def handle_describe_producers(ctx, request):
    rm = ctx.broker.replica_manager
    topics = []
    for t in request.topics:
        err = _topic_error(t.name)
        if err is None and not authz.authorize(ctx, authz.AclOperation.READ,
                                               authz.ResourceType.TOPIC, t.name):
            err = KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
        parts = [_error_partition(i, err) if err is not None
                 else describe_partition(rm, t.name, i)
                 for i in t.partition_indexes]
        topics.append(DescribeProducersResponse.TopicResponse(name=t.name, partitions=parts))
    return DescribeProducersResponse(topics=topics)
