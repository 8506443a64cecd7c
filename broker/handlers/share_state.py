"""Initialize/Read/Write/Delete/ReadSummary ShareGroupState (api keys 83-87): the share
coordinator's inter-broker API (KIP-932 "Share group state").

Behaviour (Kafka's ``KafkaApis.handle*ShareGroupStateRequest`` + ShareCoordinatorService):
each partition of the request goes to ``ctx.broker.share_coordinator``
(``coordinator.share.share_coordinator``), concurrently, and answers on its own:
NOT_COORDINATOR when this broker does not lead the key's ``__share_group_state`` partition,
COORDINATOR_LOAD_IN_PROGRESS while it loads, COORDINATOR_NOT_AVAILABLE (no coordinator, or
its append failed for lack of replicas), FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST (zero topic id, negative partition). A request
without CLUSTER_ACTION on the cluster answers CLUSTER_AUTHORIZATION_FAILED for every
partition (brokers call these APIs, clients do not). Josef's dead-letter extension rides in
a tagged field (``coordinator.share.wire``).

Version notes: v0 only (flexible), as Kafka 4.2.
"""

from __future__ import annotations

import asyncio

from broker.handlers import authz
from broker.handlers.registry import handles
from coordinator.share import wire
from coordinator.share.persister import ReadStateResult, ReadStateSummaryResult
from protocol.errors import ErrorCode, KafkaError

E = ErrorCode


def _coordinator(ctx):
    return getattr(ctx.broker, "share_coordinator", None)


def _authorized(ctx) -> bool:
    return authz.authorize_cluster(ctx, authz.AclOperation.CLUSTER_ACTION)


def _codes_error(api_key: int, requests_of):
    def build(request, version: int, error: KafkaError):
        return wire.codes_response(api_key, [(r.topic_id, r.partition, int(error.code),
                                              error.message) for r in requests_of(request)])
    return build


async def _run(ctx, reqs: list, op: str, fail) -> list:
    """Each partition's answer from the local share coordinator (`fail(code)` shapes an
    error answer)."""
    coordinator = _coordinator(ctx)
    if not _authorized(ctx):
        return [fail(E.CLUSTER_AUTHORIZATION_FAILED)] * len(reqs)
    if coordinator is None:
        return [fail(E.COORDINATOR_NOT_AVAILABLE)] * len(reqs)
    return list(await asyncio.gather(*(getattr(coordinator, op)(r) for r in reqs)))


async def _codes(ctx, request, api_key: int, requests_of, op: str):
    reqs = requests_of(request)
    codes = await _run(ctx, reqs, op, int)
    return wire.codes_response(api_key, [(r.topic_id, r.partition, int(c), None)
                                         for r, c in zip(reqs, codes, strict=True)])


@handles(wire.INITIALIZE, 0, 0,
         error_response=_codes_error(wire.INITIALIZE, wire.initialize_requests))
async def handle_initialize_share_group_state(ctx, request):
    return await _codes(ctx, request, wire.INITIALIZE, wire.initialize_requests,
                        "initialize_state")


@handles(wire.WRITE, 0, 0, error_response=_codes_error(wire.WRITE, wire.write_requests))
async def handle_write_share_group_state(ctx, request):
    return await _codes(ctx, request, wire.WRITE, wire.write_requests, "write_state")


@handles(wire.DELETE, 0, 0, error_response=_codes_error(wire.DELETE, wire.delete_requests))
async def handle_delete_share_group_state(ctx, request):
    return await _codes(ctx, request, wire.DELETE, wire.delete_requests, "delete_state")


def _read_error(request, version: int, error: KafkaError):
    return wire.read_response([(r.topic_id, r.partition, ReadStateResult(int(error.code),
                                                                         error.message))
                               for r in wire.read_requests(request)])


@handles(wire.READ, 0, 0, error_response=_read_error)
async def handle_read_share_group_state(ctx, request):
    reqs = wire.read_requests(request)
    results = await _run(ctx, reqs, "read_state", ReadStateResult)
    return wire.read_response([(r.topic_id, r.partition, res)
                               for r, res in zip(reqs, results, strict=True)])


def _summary_error(request, version: int, error: KafkaError):
    return wire.summary_response([(r.topic_id, r.partition,
                                   ReadStateSummaryResult(int(error.code), error.message))
                                  for r in wire.summary_requests(request)])


@handles(wire.READ_SUMMARY, 0, 0, error_response=_summary_error)
async def handle_read_share_group_state_summary(ctx, request):
    reqs = wire.summary_requests(request)
    results = await _run(ctx, reqs, "read_state_summary", ReadStateSummaryResult)
    return wire.summary_response([(r.topic_id, r.partition, res)
                                  for r, res in zip(reqs, results, strict=True)])
