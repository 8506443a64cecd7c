"""FindCoordinator (api key 10): which broker coordinates a group (or a transactional id).

Behaviour (Kafka's ``KafkaApis.handleFindCoordinatorRequest``, ZooKeeper mode):
- key type 0 (group): the group maps to ``__consumer_offsets`` partition
  ``(java hashCode(group) & 0x7fffffff) % offsets.topic.num.partitions``; the coordinator is
  that partition's leader. If the topic does not exist it is created (``internal_topic_spec``:
  ``offsets.topic.num.partitions``, ``offsets.topic.replication.factor``,
  cleanup.policy=compact) and the answer is COORDINATOR_NOT_AVAILABLE (15) until it has a
  live leader; clients retry. A replication factor above the live brokers makes the
  creation fail and every answer stay COORDINATOR_NOT_AVAILABLE (Kafka's behaviour since
  KIP-115; set ``offsets.topic.replication.factor=1`` on a single node).
- key type 1 (transaction): served by ``ctx.broker.transaction_coordinator`` when the broker
  has one (``partition_for(key)`` over ``__transaction_state``), else COORDINATOR_NOT_AVAILABLE.
- key type 2 (share, KIP-932): the key is ``group:topicId:partition`` (the topic id in
  Kafka's base64 form); the coordinator is the leader of ``__share_group_state`` partition
  ``abs(javaHashCode(key)) % share.coordinator.state.topic.num.partitions`` (created on
  first use like the others); a key that is not of that shape answers INVALID_REQUEST.
  Brokers ask this (their persister does the same lookup from the metadata cache); an
  authorizer requires CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
- any other key type: INVALID_REQUEST (42).
- with an authorizer: DESCRIBE on the group / transactional id, else
  GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED for that key.
Errors carry node id -1, host "", port -1.

Version notes: v0-v6 (v3+ flexible). v1 adds key_type, throttle time and error_message; v4
batches keys (``coordinator_keys`` -> one ``Coordinator`` per key); v5/v6 only change what
errors clients may see.
"""

from __future__ import annotations

import logging

from broker.handlers import authz
from broker.handlers.metadata import internal_topic_spec
from broker.handlers.registry import handles
from coordinator.group.group_store import GROUP_METADATA_TOPIC
from protocol import api
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

FIND_COORDINATOR = 10
FindCoordinatorResponse = api.API_KEYS[FIND_COORDINATOR].response_cls
TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE = 0, 1, 2
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
_WARNED: set[tuple[str, int]] = set()


def _keys(request, version: int) -> list[str]:
    return list(request.coordinator_keys) if version >= 4 else [request.key]


def _response(version: int, results: list[tuple[str, int, int, str, int, str | None]]):
    if version >= 4:
        return FindCoordinatorResponse(coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=n, host=h, port=p,
                                                error_code=int(e), error_message=m)
            for k, e, n, h, p, m in results])
    _, e, n, h, p, m = results[0]
    return FindCoordinatorResponse(error_code=int(e), error_message=m, node_id=n, host=h,
                                   port=p)


def error_response(request, version: int, error: KafkaError):
    return _response(version, [(k, int(error.code), -1, "", -1, error.message)
                               for k in _keys(request, version)])


async def _ensure_topic(broker, topic: str) -> None:
    spec = internal_topic_spec(topic, broker.config)
    results = await broker.controller.auto_create_topics([spec])
    for r in results:
        if r.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS) and \
                (topic, r.error_code) not in _WARNED:
            _WARNED.add((topic, r.error_code))  # clients retry: say it once
            log.warning("cannot create %s: %s %s", topic, ErrorCode(r.error_code).name,
                        r.error_message or "")


async def _find(ctx, key: str, key_type: int) -> tuple[str, int, int, str, int, str | None]:
    broker = ctx.broker
    unavailable = (key, int(ErrorCode.COORDINATOR_NOT_AVAILABLE), -1, "", -1,
                   "The coordinator is not available.")
    if key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        group = key_type == KEY_TYPE_GROUP
        if not authz.authorize(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.GROUP
                               if group else authz.ResourceType.TRANSACTIONAL_ID, key):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED if group \
                else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return key, int(code), -1, "", -1, None
    if key_type == KEY_TYPE_GROUP:
        coordinator = broker.group_coordinator
        if coordinator is None:
            return unavailable
        topic, partition = GROUP_METADATA_TOPIC, coordinator.partition_for(key)
    elif key_type == KEY_TYPE_TRANSACTION:
        coordinator = getattr(broker, "transaction_coordinator", None)
        if coordinator is None:
            return unavailable
        topic, partition = TRANSACTION_STATE_TOPIC, coordinator.partition_for(key)
    elif key_type == KEY_TYPE_SHARE:
        if not authz.authorize_cluster(ctx, authz.AclOperation.CLUSTER_ACTION):
            return key, int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), -1, "", -1, None
        coordinator = getattr(broker, "share_coordinator", None)
        if coordinator is None:
            return unavailable
        if key.count(":") < 2 or not key.rsplit(":", 1)[1].lstrip("-").isdigit():
            return (key, int(ErrorCode.INVALID_REQUEST), -1, "", -1,
                    f"Invalid share coordinator key {key}")
        topic, partition = SHARE_GROUP_STATE_TOPIC, coordinator.partition_for_key(key)
    else:
        return (key, int(ErrorCode.INVALID_REQUEST), -1, "", -1,
                f"Invalid coordinator type {key_type}")
    cache = broker.metadata_cache
    if not cache.contains_topic(topic):
        if broker.controller is not None:
            await _ensure_topic(broker, topic)
        return unavailable
    node = cache.partition_leader_node(topic, partition, broker.listener_name(ctx.listener))
    if node is None:
        return unavailable
    return key, int(ErrorCode.NONE), node.id, node.host, node.port, None


@handles(FIND_COORDINATOR, 0, 6, error_response=error_response)
async def handle_find_coordinator(ctx, request):
    version = ctx.api_version
    key_type = request.key_type if version >= 1 else KEY_TYPE_GROUP
    keys = _keys(request, version)
    if version < 4 and request.key is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "null coordinator key")
    results = [await _find(ctx, key, key_type) for key in keys]
    return _response(version, results)
