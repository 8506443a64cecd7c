"""DescribeTransactions (65) and ListTransactions (66): the admin view of the transaction
coordinator (KIP-664; Kafka's handleDescribeTransactionsRequest /
handleListTransactionsRequest). Both are answered by the broker that coordinates the ids
(clients find it with FindCoordinator key type 1; ListTransactions goes to every broker).

Behaviour:
- DescribeTransactions: per transactional id its state, timeout, start time, producer id
  and epoch and partitions; TRANSACTIONAL_ID_NOT_FOUND (unknown or Dead), NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST (empty id),
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (issue 15's authorizer, DESCRIBE).
- ListTransactions: the ids this broker coordinates, filtered by state names (unknown names
  are echoed in `unknown_state_filters` and match nothing), producer ids and (v1, KIP-994)
  a minimum running time `duration_filter` in ms, and (v2, KIP-1152) a
  `transactional_id_pattern`: a regular expression (RE2 syntax) the whole id must match,
  null or empty = every id, INVALID_REGULAR_EXPRESSION when it does not compile;
  COORDINATOR_LOAD_IN_PROGRESS while a partition loads. Ids the caller may not DESCRIBE
  are left out.

Version notes: DescribeTransactions v0; ListTransactions v0-v2 (v1 duration_filter, v2
transactional_id_pattern). Both flexible.
"""

from __future__ import annotations

from broker.handlers.registry import error_code_response, handles
from broker.handlers.transactions import authorize_transactional_id
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)

DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
_D = DescribeTransactionsResponse
_L = ListTransactionsResponse


def _state(txn_id: str, error: ErrorCode, md=None) -> _D.TransactionState:
    if md is None:
        return _D.TransactionState(error_code=error, transactional_id=txn_id,
                                   transaction_state="", transaction_timeout_ms=0,
                                   transaction_start_time_ms=-1, producer_id=-1,
                                   producer_epoch=-1, topics=[])
    topics: dict[str, list[int]] = {}
    for t, p in sorted(md.topic_partitions):
        topics.setdefault(t, []).append(p)
    return _D.TransactionState(
        error_code=ErrorCode.NONE, transactional_id=txn_id,
        transaction_state=md.state.state_name, transaction_timeout_ms=md.txn_timeout_ms,
        transaction_start_time_ms=md.txn_start_timestamp, producer_id=md.producer_id,
        producer_epoch=md.producer_epoch,
        topics=[_D.TopicData(topic=t, partitions=ps) for t, ps in topics.items()])


def describe_error_response(req: DescribeTransactionsRequest, version: int, error: KafkaError):
    return _D(transaction_states=[_state(t, error.code) for t in req.transactional_ids])


@handles(DESCRIBE_TRANSACTIONS, 0, 0, error_response=describe_error_response)
def handle_describe_transactions(ctx, req: DescribeTransactionsRequest):
    coordinator = getattr(ctx.broker, "transaction_coordinator", None)
    states = []
    for txn_id in req.transactional_ids:
        denied = authorize_transactional_id(ctx, txn_id, "DESCRIBE")
        if denied is not None:
            states.append(_state(txn_id, denied))
            continue
        if coordinator is None:
            states.append(_state(txn_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        error, md = coordinator.handle_describe(txn_id)
        states.append(_state(txn_id, error, md))
    return _D(transaction_states=states)


list_error_response = error_code_response(ListTransactionsResponse)


def _id_pattern(req: ListTransactionsRequest, version: int):
    """The compiled v2 pattern, None for every id; KafkaError INVALID_REGULAR_EXPRESSION."""
    if version < 2 or not req.transactional_id_pattern:
        return None
    import re2
    try:
        return re2.compile(req.transactional_id_pattern)
    except re2.error as e:
        raise KafkaError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                         f"invalid transactional id pattern: {e}") from None


@handles(LIST_TRANSACTIONS, 0, 2, error_response=list_error_response)
def handle_list_transactions(ctx, req: ListTransactionsRequest):
    pattern = _id_pattern(req, ctx.api_version)
    coordinator = getattr(ctx.broker, "transaction_coordinator", None)
    if coordinator is None:
        return _L(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    duration = req.duration_filter if ctx.api_version >= 1 else -1
    error, unknown, found = coordinator.handle_list(req.producer_id_filters or (),
                                                    req.state_filters or (), duration)
    rows = [_L.TransactionState(transactional_id=md.transactional_id,
                                producer_id=md.producer_id,
                                transaction_state=md.state.state_name)
            for md in sorted(found, key=lambda m: m.transactional_id)
            if (pattern is None or pattern.fullmatch(md.transactional_id))
            and authorize_transactional_id(ctx, md.transactional_id, "DESCRIBE") is None]
    return _L(error_code=error, unknown_state_filters=unknown, transaction_states=rows)
