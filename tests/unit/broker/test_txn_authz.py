"""The transactional APIs answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED when the broker's
authorizer (broker.handlers.authz -> ctx.broker.security.authorizer) denies the
transactional id, before any coordinator work; allowed ids reach the coordinator."""

from types import SimpleNamespace

from broker.handlers import producer_id, transactions, transactions_admin
from common.acl import AclOperation, ResourceType
from protocol.errors import ErrorCode
from protocol.messages import (
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)


class DenySecret:
    def __init__(self):
        self.asked = []

    def authorize(self, ctx, op, rtype, name, log_if_denied=True, log_if_allowed=True):
        self.asked.append((op, rtype, name))
        return not (rtype == ResourceType.TRANSACTIONAL_ID and name == "secret")


def ctx(authorizer, version=4):
    broker = SimpleNamespace(security=SimpleNamespace(authorizer=authorizer),
                             transaction_coordinator=None)
    return SimpleNamespace(api_version=version, broker=broker)


async def test_transactional_id_authorization():
    auth = DenySecret()
    req = InitProducerIdRequest(transactional_id="secret", transaction_timeout_ms=1000)
    resp = await producer_id.handle_init_producer_id(ctx(auth), req)
    assert resp.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert auth.asked[-1] == (AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "secret")
    req.transactional_id = "open"  # allowed: reaches the (missing) coordinator
    resp = await producer_id.handle_init_producer_id(ctx(auth), req)
    assert resp.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    end = EndTxnRequest(transactional_id="secret", producer_id=1, producer_epoch=0,
                        committed=True)
    assert (await transactions.handle_end_txn(ctx(auth), end)).error_code == \
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    desc = transactions_admin.handle_describe_transactions(
        ctx(auth, 0), DescribeTransactionsRequest(transactional_ids=["secret", "open"]))
    assert [s.error_code for s in desc.transaction_states] == [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.COORDINATOR_NOT_AVAILABLE]
    assert auth.asked[-1] == (AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, "open")
