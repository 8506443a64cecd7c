"""DescribeCluster (api key 60): brokers, cluster id and controller, for admin clients.

Behaviour (Kafka's ``KafkaApis.handleDescribeCluster``): the live brokers' endpoints for the
listener the request arrived on, ``cluster_id``, ``controller_id`` (-1 before the first
UpdateMetadata). ``endpoint_type`` (v1) must be 1 (brokers): a broker cannot describe
controller endpoints, so 2 (controllers) or anything else gets UNSUPPORTED_ENDPOINT_TYPE
(115). ``cluster_authorized_operations``, when asked for: what the principal may do on the
cluster (every cluster operation without an authorizer; 0 without DESCRIBE on it), else
-2147483648 (the schema default).

Version notes: v0-v2, all flexible; v1 adds ``endpoint_type`` (KIP-919); v2
``include_fenced_brokers`` and each broker's ``is_fenced`` (KIP-1073). Fencing is a KRaft
state: in ZooKeeper mode a broker is listed while its registration znode lives, so there is
never a fenced broker to add and every ``is_fenced`` is false.
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.metadata import AUTHORIZED_OPERATIONS_OMITTED
from broker.handlers.registry import handles
from protocol import api
from protocol.errors import ErrorCode, KafkaError

DESCRIBE_CLUSTER = 60
ENDPOINT_TYPE_BROKER = 1
DescribeClusterResponse = api.API_KEYS[DESCRIBE_CLUSTER].response_cls


def error_response(request, version: int, error: KafkaError):
    return DescribeClusterResponse(error_code=int(error.code), error_message=error.message,
                                   endpoint_type=request.endpoint_type)


@handles(DESCRIBE_CLUSTER, 0, 2, error_response=error_response)
def handle_describe_cluster(ctx, request):
    if ctx.api_version >= 1 and request.endpoint_type != ENDPOINT_TYPE_BROKER:
        return DescribeClusterResponse(
            error_code=int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
            error_message="The broker only supports the BROKER endpoint type "
                          f"(got {request.endpoint_type})",
            endpoint_type=request.endpoint_type)
    cache = ctx.broker.metadata_cache
    listener = ctx.broker.listener_name(ctx.listener)
    controller_id = cache.controller_id
    return DescribeClusterResponse(
        endpoint_type=ENDPOINT_TYPE_BROKER,
        cluster_id=cache.cluster_id or "",
        controller_id=-1 if controller_id is None else controller_id,
        brokers=[DescribeClusterResponse.DescribeClusterBroker(
            broker_id=n.id, host=n.host, port=n.port, rack=n.rack, is_fenced=False)
            for n in cache.alive_broker_nodes(listener)],
        cluster_authorized_operations=_cluster_operations(ctx, request))


def _cluster_operations(ctx, request) -> int:
    """Kafka: the bit field only with DESCRIBE on the cluster (else 0), when asked for."""
    if not request.include_cluster_authorized_operations:
        return AUTHORIZED_OPERATIONS_OMITTED
    if not authz.authorize_cluster(ctx, authz.AclOperation.DESCRIBE):
        return 0
    return authz.authorized_operations(ctx, authz.ResourceType.CLUSTER, authz.CLUSTER_NAME)
