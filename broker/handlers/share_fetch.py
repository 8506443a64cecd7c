"""ShareFetch (78) and ShareAcknowledge (79): share consumers fetch and acknowledge records.

Behaviour (Kafka's ``KafkaApis.handleShareFetchRequest`` / ``handleShareAcknowledgeRequest``,
KIP-932 "Share sessions", "Acknowledging records"):
- Top level, in this order: UNSUPPORTED_VERSION while ``share.version`` is 0;
  GROUP_AUTHORIZATION_FAILED without READ on the group; INVALID_REQUEST for an empty group
  or member id, acknowledgements in a session-opening ShareFetch (epoch 0) or fetch data
  in ShareAcknowledge; the share-session errors of ``broker.share.sessions``
  (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED;
  ShareAcknowledge with epoch 0 is INVALID_SHARE_SESSION_EPOCH).
- ShareFetch: the request's partitions join the member's share session, forgotten ones
  leave it. Piggy-backed acknowledgements are applied first (per partition, all or nothing,
  answered as ``AcknowledgeErrorCode``: INVALID_REQUEST, INVALID_RECORD_STATE,
  COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, FENCED_STATE_EPOCH, ...), then every
  partition of the session is fetched (``broker.share.fetch``): records acquired for the
  member with their ``AcquiredRecords`` ranges and delivery counts, waiting up to
  ``MaxWaitMs`` when none is available. ``AcquisitionLockTimeoutMs`` is the group's
  ``share.record.lock.duration.ms``. A session-opening fetch answers every partition; later
  ones only partitions with records, errors or acknowledgement results. Epoch -1
  acknowledges, then closes the session (the member's remaining records are released) and
  fetches nothing.
- ShareAcknowledge: the acknowledgements only, per partition ``ErrorCode``; epoch -1 closes
  the session afterwards.
- Per partition: TOPIC_AUTHORIZATION_FAILED without READ on the topic, UNKNOWN_TOPIC_ID,
  NOT_LEADER_OR_FOLLOWER (with ``CurrentLeader`` and the leader in ``NodeEndpoints``),
  UNKNOWN_TOPIC_OR_PARTITION, and the share-partition load errors.

Version notes: both v1 only (Kafka 4.1+: ``MaxRecords``/``BatchSize``, no
``PartitionMaxBytes``, ``AcquisitionLockTimeoutMs``); flexible.
"""

from __future__ import annotations

import asyncio
import uuid

from broker.handlers import authz
from broker.handlers.registry import handles
from broker.handlers.share_groups import require_share_groups
from broker.share.fetch import PartitionResult, ShareFetchParams
from broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH
from coordinator.share.state import AcknowledgementBatch
from protocol import api
from protocol.errors import ErrorCode, KafkaError

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
FetchResponse = api.API_KEYS[SHARE_FETCH].response_cls
AckResponse = api.API_KEYS[SHARE_ACKNOWLEDGE].response_cls
E = ErrorCode
TP = tuple[uuid.UUID, int]


def fetch_error_response(request, version: int, error: KafkaError):
    return FetchResponse(error_code=int(error.code), error_message=error.message, responses=[],
                         node_endpoints=[])


def ack_error_response(request, version: int, error: KafkaError):
    return AckResponse(error_code=int(error.code), error_message=error.message, responses=[],
                       node_endpoints=[])


def _manager(ctx):
    manager = getattr(ctx.broker, "share_partitions", None)
    if manager is None:
        raise KafkaError(E.UNSUPPORTED_VERSION, "share groups are not available on this broker")
    return manager


def _check_request(ctx, request) -> None:
    require_share_groups(ctx)
    if not authz.authorize(ctx, authz.AclOperation.READ, authz.ResourceType.GROUP,
                           request.group_id or ""):
        raise KafkaError(E.GROUP_AUTHORIZATION_FAILED, None)
    if not request.group_id:
        raise KafkaError(E.INVALID_REQUEST, "GroupId can't be empty.")
    if not request.member_id:
        raise KafkaError(E.INVALID_REQUEST, "MemberId can't be empty.")


def _acks(topics) -> dict[TP, list[AcknowledgementBatch]]:
    out: dict[TP, list[AcknowledgementBatch]] = {}
    for t in topics:
        for p in t.partitions:
            if p.acknowledgement_batches:
                out.setdefault((t.topic_id, p.partition_index), []).extend(
                    AcknowledgementBatch(b.first_offset, b.last_offset,
                                         tuple(b.acknowledge_types))
                    for b in p.acknowledgement_batches)
    return out


def _denied(ctx, manager, tps) -> dict[TP, ErrorCode]:
    """Partitions whose topic may not be read (TOPIC_AUTHORIZATION_FAILED)."""
    if not authz.enabled(ctx):
        return {}
    cache = manager.services.metadata_cache
    names = {tp: cache.topic_name(tp[0]) for tp in tps}
    refused = authz.unauthorized(ctx, authz.AclOperation.READ, authz.ResourceType.TOPIC,
                                 {n for n in names.values() if n is not None})
    return {tp: E.TOPIC_AUTHORIZATION_FAILED for tp, n in names.items() if n in refused}


def _leader_hints(ctx, manager, tps) -> tuple[dict[TP, tuple[int, int]], list]:
    """(leader id, leader epoch) per partition, and the leaders' endpoints."""
    cache = manager.services.metadata_cache
    hints: dict[TP, tuple[int, int]] = {}
    nodes = {}
    listener = ctx.broker.listener_name(ctx.listener)
    for tid, p in tps:
        name = cache.topic_name(tid)
        state = cache.partition_state(name, p) if name is not None else None
        if state is None:
            continue
        hints[(tid, p)] = (state.leader, state.leader_epoch)
        node = cache.alive_broker_node(state.leader, listener) if state.leader >= 0 else None
        if node is not None:
            nodes[node.id] = node
    return hints, [FetchResponse.NodeEndpoint(node_id=n.id, host=n.host, port=n.port,
                                              rack=getattr(n, "rack", None))
                   for n in nodes.values()]


@handles(SHARE_FETCH, 1, 1, error_response=fetch_error_response)
async def handle_share_fetch(ctx, request):
    _check_request(ctx, request)
    manager = _manager(ctx)
    group, member, epoch = request.group_id, request.member_id, request.share_session_epoch
    acks = _acks(request.topics)
    listed = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    forgotten = [(f.topic_id, p) for f in request.forgotten_topics_data for p in f.partitions]
    cache = manager.services.metadata_cache
    sessions = manager.sessions
    if epoch == INITIAL_EPOCH:
        if acks:
            raise KafkaError(E.INVALID_REQUEST, "Acknowledge data present in initial ShareFetch.")
        session = sessions.open(group, member, [(tp, cache.topic_name(tp[0]) or "")
                                                for tp in listed])
    elif epoch == FINAL_EPOCH:
        session = sessions.get(group, member)
        if session is None:
            raise KafkaError(E.SHARE_SESSION_NOT_FOUND,
                             f"No share session for member {member} of group {group}.")
    else:
        session = sessions.next(group, member, epoch)
        for tp in listed:
            session.partitions.setdefault(tp, cache.topic_name(tp[0]) or "")
        for tp in forgotten:
            session.partitions.pop(tp, None)
    denied = _denied(ctx, manager, set(session.partitions) | set(acks))
    acknowledging = manager.acknowledge(
        group, member, {tp: b for tp, b in acks.items() if tp not in denied})
    if epoch == FINAL_EPOCH:
        ack_codes = await acknowledging
        sessions.close(group, member)
        results: dict[TP, PartitionResult] = {}
    else:  # acknowledge and fetch at once (as Kafka): the ack write overlaps the log read
        params = ShareFetchParams(request.max_wait_ms, request.min_bytes, request.max_bytes,
                                  request.max_records, request.batch_size)
        fetchable = [tp for tp in session.partitions if tp not in denied]
        ack_codes, results = await asyncio.gather(acknowledging, manager.fetcher.fetch(
            group, member, fetchable, params, refresh=epoch == INITIAL_EPOCH))
        for tp in session.partitions:
            if tp in denied:
                results[tp] = PartitionResult(denied[tp])
    ack_codes.update({tp: code for tp, code in denied.items() if tp in acks})
    full = epoch == INITIAL_EPOCH
    entries: dict[TP, FetchResponse.PartitionData] = {}
    errors = [tp for tp, r in results.items() if r.error != E.NONE]
    hints, endpoints = _leader_hints(ctx, manager, errors) if errors else ({}, [])
    for tp, r in results.items():
        if not (full or r.acquired or r.error != E.NONE or tp in ack_codes):
            continue
        leader_id, leader_epoch = hints.get(tp, (-1, -1))
        entries[tp] = FetchResponse.PartitionData(
            partition_index=tp[1], error_code=int(r.error),
            acknowledge_error_code=int(ack_codes.get(tp, E.NONE)),
            current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=leader_id,
                                                          leader_epoch=leader_epoch),
            records=r.records if r.acquired else None,
            acquired_records=[FetchResponse.AcquiredRecords(
                first_offset=a.first_offset, last_offset=a.last_offset,
                delivery_count=a.delivery_count) for a in r.acquired])
    for tp, code in ack_codes.items():
        if tp not in entries:
            entries[tp] = FetchResponse.PartitionData(
                partition_index=tp[1], error_code=0, acknowledge_error_code=int(code),
                current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                records=None, acquired_records=[])
    manager.metrics.record(results, ack_codes, acks)
    return FetchResponse(
        error_code=0, acquisition_lock_timeout_ms=manager.config_for(group)
        .record_lock_duration_ms, responses=_by_topic(FetchResponse.ShareFetchableTopicResponse,
                                                      entries), node_endpoints=endpoints)


def _by_topic(cls, entries: dict) -> list:
    topics: dict[uuid.UUID, list] = {}
    for (tid, _p), data in entries.items():
        topics.setdefault(tid, []).append(data)
    return [cls(topic_id=tid, partitions=parts) for tid, parts in topics.items()]


@handles(SHARE_ACKNOWLEDGE, 1, 1, error_response=ack_error_response)
async def handle_share_acknowledge(ctx, request):
    _check_request(ctx, request)
    manager = _manager(ctx)
    group, member, epoch = request.group_id, request.member_id, request.share_session_epoch
    sessions = manager.sessions
    if epoch == INITIAL_EPOCH:
        raise KafkaError(E.INVALID_SHARE_SESSION_EPOCH,
                         "ShareAcknowledge cannot open a share session (epoch 0).")
    if epoch == FINAL_EPOCH:
        if sessions.get(group, member) is None:
            raise KafkaError(E.SHARE_SESSION_NOT_FOUND,
                             f"No share session for member {member} of group {group}.")
    else:
        sessions.next(group, member, epoch)
    acks = _acks(request.topics)
    denied = _denied(ctx, manager, set(acks))
    codes = await manager.acknowledge(group, member,
                                      {tp: b for tp, b in acks.items() if tp not in denied})
    codes.update(denied)
    if epoch == FINAL_EPOCH:
        sessions.close(group, member)
    errors = [tp for tp, c in codes.items() if c != E.NONE]
    hints, endpoints = _leader_hints(ctx, manager, errors) if errors else ({}, [])
    entries = {}
    for tp, code in codes.items():
        leader_id, leader_epoch = hints.get(tp, (-1, -1))
        entries[tp] = AckResponse.PartitionData(
            partition_index=tp[1], error_code=int(code),
            current_leader=AckResponse.LeaderIdAndEpoch(leader_id=leader_id,
                                                        leader_epoch=leader_epoch))
    manager.metrics.record({}, codes, acks)
    return AckResponse(error_code=0, responses=_by_topic(
        AckResponse.ShareAcknowledgeTopicResponse, entries), node_endpoints=[
        AckResponse.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
        for n in endpoints])
