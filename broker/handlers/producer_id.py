# Behaviour: InitProducerId (api key 22) gives an idempotent producer (no transactional id) a
#   fresh producer id with epoch 0, from blocks reserved through the controller
#   (broker.producer_id_manager). As in Kafka, a producer without a transactional id that
#   sends its old producer id and epoch (KIP-360, v3+) also gets a new id: without a
#   transactional id there is no state to bump an epoch on. An empty transactional id is
#   INVALID_REQUEST (Kafka's check).
#   Transactions are not implemented yet: a request with a transactional id answers
#   UNSUPPORTED_VERSION. Chosen because it is non-retriable (the Java client fails
#   initTransactions() at once with "Unexpected error in InitProducerIdResponse; The version
#   of API is not supported", librdkafka fails fatally) and is what Kafka-compatible brokers
#   without transactions return; Kafka's own "transaction coordinator not ready" code,
#   COORDINATOR_NOT_AVAILABLE, would make clients retry until their timeout, and
#   TRANSACTIONAL_ID_AUTHORIZATION_FAILED would wrongly suggest missing ACLs.
#   COORDINATOR_LOAD_IN_PROGRESS (retriable) when no producer id block can be allocated.
# Authorization: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
#   without one, IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679), else
#   CLUSTER_AUTHORIZATION_FAILED.
# Version notes: v0-v1 identical; v2+ flexible; v3+ producer_id / producer_epoch in the
#   request (KIP-360); v4 adds PRODUCER_FENCED for transactional ids; v5 (KIP-890) is the
#   same on the wire.

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import error_code_response, handles
from protocol.errors import ErrorCode
from protocol.messages import InitProducerIdRequest, InitProducerIdResponse

API_KEY = 22
MIN_VERSION, MAX_VERSION = 0, 5

TRANSACTIONS_UNSUPPORTED = ErrorCode.UNSUPPORTED_VERSION


error_response = error_code_response(InitProducerIdResponse, producer_id=-1, producer_epoch=-1)


@handles(API_KEY, MIN_VERSION, MAX_VERSION, error_response=error_response)
async def handle_init_producer_id(ctx, req: InitProducerIdRequest) -> InitProducerIdResponse:
    txn_id = req.transactional_id
    if txn_id is not None and not authz.authorize(
            ctx, authz.AclOperation.WRITE, authz.ResourceType.TRANSACTIONAL_ID, txn_id):
        return InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    if txn_id is None and authz.enabled(ctx) and not authz.authorize_cluster(
            ctx, authz.AclOperation.IDEMPOTENT_WRITE, log_if_denied=False) \
            and not authz.authorize_by_resource_type(ctx, authz.AclOperation.WRITE,
                                                     authz.ResourceType.TOPIC):
        return InitProducerIdResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    if txn_id is not None:
        code = ErrorCode.INVALID_REQUEST if txn_id == "" else TRANSACTIONS_UNSUPPORTED
        return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)
    pid = await ctx.broker.producer_id_manager.generate_producer_id()
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)
