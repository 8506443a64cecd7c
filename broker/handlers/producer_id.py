# Behaviour: InitProducerId (api key 22). Without a transactional id (idempotent producers) a
#   fresh producer id with epoch 0, from blocks reserved through the controller
#   (broker.producer_id_manager); as in Kafka, a producer without a transactional id that
#   sends its old producer id and epoch (KIP-360, v3+) also gets a new id. With a
#   transactional id the transaction coordinator answers
#   (coordinator.transaction.coordinator: epoch bump and fencing of the previous
#   producer, an Ongoing transaction fenced and aborted -> CONCURRENT_TRANSACTIONS so the
#   client retries, KIP-360/588 recovery with the expected producer id and epoch,
#   INVALID_TRANSACTION_TIMEOUT, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
#   PRODUCER_FENCED). An empty transactional id, or only one of producer id / epoch set, is
#   INVALID_REQUEST. COORDINATOR_LOAD_IN_PROGRESS (retriable) when no producer id block can
#   be allocated. Authorization (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): see
#   broker.handlers.transactions.authorize_transactional_id.
#   Without a transactional id (idempotence) the principal needs IDEMPOTENT_WRITE on the
#   cluster or WRITE on some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED.
# Version notes: v0-v1 identical; v2+ flexible; v3+ producer_id / producer_epoch in the
#   request (KIP-360); v4 adds PRODUCER_FENCED (older versions get INVALID_PRODUCER_EPOCH);
#   v5 (KIP-890) adds TRANSACTION_ABORTABLE, same on the wire; v6 (KIP-939, still marked
#   unstable in Kafka 4.2) adds enable2_pc / keep_prepared_txn and the response's
#   ongoing_txn_producer_id / epoch (always -1: no prepared transaction exists here).
#   Josef has no two-phase commit: enable2_pc answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
#   as Kafka does with transaction.two.phase.commit.enable=false (so a client cannot probe
#   the setting), and keep_prepared_txn answers UNSUPPORTED_VERSION, as Kafka 4.2 does.

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import error_code_response, handles
from broker.handlers.transactions import authorize_transactional_id, fenced_for_version
from protocol.errors import ErrorCode
from protocol.messages import InitProducerIdRequest, InitProducerIdResponse

API_KEY = 22
MIN_VERSION, MAX_VERSION = 0, 6
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

error_response = error_code_response(InitProducerIdResponse, producer_id=-1, producer_epoch=-1)


def _fail(code: ErrorCode) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1,
                                  ongoing_txn_producer_id=-1, ongoing_txn_producer_epoch=-1)


@handles(API_KEY, MIN_VERSION, MAX_VERSION, error_response=error_response)
async def handle_init_producer_id(ctx, req: InitProducerIdRequest) -> InitProducerIdResponse:
    version = ctx.api_version
    txn_id = req.transactional_id
    pid, epoch = (req.producer_id, req.producer_epoch) if version >= 3 else (-1, -1)
    if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        return _fail(ErrorCode.INVALID_REQUEST)
    if txn_id is None and authz.enabled(ctx) and not authz.authorize_cluster(
            ctx, authz.AclOperation.IDEMPOTENT_WRITE, log_if_denied=False) \
            and not authz.authorize_by_resource_type(ctx, authz.AclOperation.WRITE,
                                                     authz.ResourceType.TOPIC):
        return _fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if txn_id is None:
        new = await ctx.broker.producer_id_manager.generate_producer_id()
        return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=new,
                                      producer_epoch=0)
    if txn_id == "":
        return _fail(ErrorCode.INVALID_REQUEST)
    denied = authorize_transactional_id(ctx, txn_id, "WRITE")
    if denied is not None:
        return _fail(denied)
    if version >= 6 and req.enable2_pc:  # KIP-939: two-phase commit is not enabled here
        return _fail(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if version >= 6 and req.keep_prepared_txn:
        return _fail(ErrorCode.UNSUPPORTED_VERSION)
    coordinator = getattr(ctx.broker, "transaction_coordinator", None)
    if coordinator is None:
        return _fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    expected = None if pid == NO_PRODUCER_ID else (pid, epoch)
    error, new_pid, new_epoch = await coordinator.handle_init_producer_id(
        txn_id, req.transaction_timeout_ms, expected)
    if error != ErrorCode.NONE:
        return _fail(fenced_for_version(error, version, 4))
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=new_pid,
                                  producer_epoch=new_epoch, ongoing_txn_producer_id=-1,
                                  ongoing_txn_producer_epoch=-1)
