"""The *ShareGroupState RPCs (api keys 83-87) <-> the persister's request/result dataclasses.

Both ends use this module: the share-partition leader's persister (building requests,
reading responses) and the share coordinator's handlers (reading requests, building
responses). One RPC carries many partitions of one group; the dataclasses are one partition
each (`coordinator.share.persister`).

Josef's dead-letter extension rides as one unknown tagged field, tag
`records.JOSEF_EXTENSION_TAG`, on each partition: WriteShareGroupState's `PartitionData`
(intents added, sequences done, the DLQ producer) and ReadShareGroupState's
`PartitionResult` (pending intents, next sequence, producer), payload as
`records.encode_extension`. A Kafka broker ignores the tag; a Josef broker reading a Kafka
request without it sees no dead letters.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from coordinator.share.persister import (
    DeleteStateRequest,
    InitializeStateRequest,
    ReadStateRequest,
    ReadStateResult,
    ReadStateSummaryRequest,
    ReadStateSummaryResult,
    WriteStateRequest,
)
from coordinator.share.records import (
    JOSEF_EXTENSION_TAG,
    DeadLetterExtension,
    decode_extension,
    encode_extension,
)
from coordinator.share.state import StateBatch
from protocol.errors import ProtocolError
from protocol.messages import MESSAGES

__all__ = [
    "INITIALIZE", "READ", "WRITE", "DELETE", "READ_SUMMARY",
    "delete_requests", "delete_rpc", "initialize_requests", "initialize_rpc",
    "partition_results", "read_requests", "read_results", "read_rpc", "read_response",
    "summary_requests", "summary_results", "summary_rpc", "summary_response",
    "write_requests", "write_rpc", "codes_response",
]

INITIALIZE, READ, WRITE, DELETE, READ_SUMMARY = 83, 84, 85, 86, 87
_M = MESSAGES
_Write = _M["WriteShareGroupStateRequest"]
_Read = _M["ReadShareGroupStateRequest"]
_ReadResp = _M["ReadShareGroupStateResponse"]
_Init = _M["InitializeShareGroupStateRequest"]
_Delete = _M["DeleteShareGroupStateRequest"]
_Summary = _M["ReadShareGroupStateSummaryRequest"]
_SummaryResp = _M["ReadShareGroupStateSummaryResponse"]

#: api key -> (response class, topic result class name, partition result class name)
_RESULT_CLASSES = {
    INITIALIZE: ("InitializeShareGroupStateResponse", "InitializeStateResult"),
    WRITE: ("WriteShareGroupStateResponse", "WriteStateResult"),
    DELETE: ("DeleteShareGroupStateResponse", "DeleteStateResult"),
}


def _by_topic(items: Iterable, topic_of) -> dict[uuid.UUID, list]:
    out: dict[uuid.UUID, list] = {}
    for item in items:
        out.setdefault(topic_of(item), []).append(item)
    return out


def _extension(tags) -> DeadLetterExtension | None:
    raw = (tags or {}).get(JOSEF_EXTENSION_TAG)
    if raw is None:
        return None
    try:
        return decode_extension(bytes(raw))
    except ProtocolError:
        return None


def _batches(items) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                 for b in items or ())


# ---------------------------------------------------------------- building requests (leader)
def write_rpc(group_id: str, reqs: Sequence[WriteStateRequest]):
    P = _Write.PartitionData
    topics = []
    for tid, parts in _by_topic(reqs, lambda r: r.topic_id).items():
        data = []
        for r in parts:
            p = P(partition=r.partition, state_epoch=r.state_epoch, leader_epoch=r.leader_epoch,
                  start_offset=r.start_offset, state_batches=[
                      _Write.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                        delivery_state=b.delivery_state,
                                        delivery_count=b.delivery_count)
                      for b in r.state_batches])
            ext = DeadLetterExtension(r.dead_letters_added, r.dead_letters_done, -1,
                                      *(r.dead_letter_producer or (-1, -1)))
            if not ext.empty:
                p.unknown_tagged_fields = {JOSEF_EXTENSION_TAG: encode_extension(ext)}
            data.append(p)
        topics.append(_Write.WriteStateData(topic_id=tid, partitions=data))
    return _Write(group_id=group_id, topics=topics)


def read_rpc(group_id: str, reqs: Sequence[ReadStateRequest]):
    return _Read(group_id=group_id, topics=[
        _Read.ReadStateData(topic_id=tid, partitions=[
            _Read.PartitionData(partition=r.partition, leader_epoch=r.leader_epoch) for r in ps])
        for tid, ps in _by_topic(reqs, lambda r: r.topic_id).items()])


def summary_rpc(group_id: str, reqs: Sequence[ReadStateSummaryRequest]):
    return _Summary(group_id=group_id, topics=[
        _Summary.ReadStateSummaryData(topic_id=tid, partitions=[
            _Summary.PartitionData(partition=r.partition, leader_epoch=r.leader_epoch)
            for r in ps])
        for tid, ps in _by_topic(reqs, lambda r: r.topic_id).items()])


def initialize_rpc(group_id: str, reqs: Sequence[InitializeStateRequest]):
    return _Init(group_id=group_id, topics=[
        _Init.InitializeStateData(topic_id=tid, partitions=[
            _Init.PartitionData(partition=r.partition, state_epoch=r.state_epoch,
                                start_offset=r.start_offset) for r in ps])
        for tid, ps in _by_topic(reqs, lambda r: r.topic_id).items()])


def delete_rpc(group_id: str, reqs: Sequence[DeleteStateRequest]):
    return _Delete(group_id=group_id, topics=[
        _Delete.DeleteStateData(topic_id=tid, partitions=[
            _Delete.PartitionData(partition=r.partition) for r in ps])
        for tid, ps in _by_topic(reqs, lambda r: r.topic_id).items()])


# ---------------------------------------------------------------- reading requests (coordinator)
def write_requests(req) -> list[WriteStateRequest]:
    out = []
    for t in req.topics:
        for p in t.partitions:
            ext = _extension(p.unknown_tagged_fields) or DeadLetterExtension()
            producer = (ext.producer_id, ext.producer_epoch) if ext.producer_id >= 0 else None
            out.append(WriteStateRequest(
                req.group_id, t.topic_id, p.partition, p.state_epoch, p.leader_epoch,
                p.start_offset, _batches(p.state_batches), ext.dead_letters, ext.done, producer))
    return out


def read_requests(req) -> list[ReadStateRequest]:
    return [ReadStateRequest(req.group_id, t.topic_id, p.partition, p.leader_epoch)
            for t in req.topics for p in t.partitions]


def summary_requests(req) -> list[ReadStateSummaryRequest]:
    return [ReadStateSummaryRequest(req.group_id, t.topic_id, p.partition, p.leader_epoch)
            for t in req.topics for p in t.partitions]


def initialize_requests(req) -> list[InitializeStateRequest]:
    return [InitializeStateRequest(req.group_id, t.topic_id, p.partition, p.state_epoch,
                                   p.start_offset)
            for t in req.topics for p in t.partitions]


def delete_requests(req) -> list[DeleteStateRequest]:
    return [DeleteStateRequest(req.group_id, t.topic_id, p.partition)
            for t in req.topics for p in t.partitions]


# ---------------------------------------------------------------- responses
def codes_response(api_key: int, results: Sequence[tuple[uuid.UUID, int, int, str | None]]):
    """Initialize/Write/Delete responses from (topic id, partition, error code, message)."""
    resp_name, topic_name = _RESULT_CLASSES[api_key]
    R = _M[resp_name]
    topic_cls = getattr(R, topic_name)
    return R(results=[
        topic_cls(topic_id=tid, partitions=[
            R.PartitionResult(partition=p, error_code=int(code), error_message=msg)
            for _, p, code, msg in rs])
        for tid, rs in _by_topic(results, lambda r: r[0]).items()])


def read_response(results: Sequence[tuple[uuid.UUID, int, ReadStateResult]]):
    out = []
    for tid, rs in _by_topic(results, lambda r: r[0]).items():
        parts = []
        for _, p, r in rs:
            pr = _ReadResp.PartitionResult(
                partition=p, error_code=int(r.error_code), error_message=r.error_message,
                state_epoch=r.state_epoch, start_offset=r.start_offset, state_batches=[
                    _ReadResp.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                         delivery_state=b.delivery_state,
                                         delivery_count=b.delivery_count)
                    for b in r.state_batches])
            ext = DeadLetterExtension(r.dead_letters, (), r.next_dead_letter_sequence,
                                      *(r.dead_letter_producer or (-1, -1)))
            if not ext.empty:
                pr.unknown_tagged_fields = {JOSEF_EXTENSION_TAG: encode_extension(ext)}
            parts.append(pr)
        out.append(_ReadResp.ReadStateResult(topic_id=tid, partitions=parts))
    return _ReadResp(results=out)


def summary_response(results: Sequence[tuple[uuid.UUID, int, ReadStateSummaryResult]]):
    return _SummaryResp(results=[
        _SummaryResp.ReadStateSummaryResult(topic_id=tid, partitions=[
            _SummaryResp.PartitionResult(partition=p, error_code=int(r.error_code),
                                         error_message=r.error_message,
                                         state_epoch=r.state_epoch, leader_epoch=r.leader_epoch,
                                         start_offset=r.start_offset)
            for _, p, r in rs])
        for tid, rs in _by_topic(results, lambda r: r[0]).items()])


# ---------------------------------------------------------------- reading responses (leader)
def partition_results(resp) -> dict[tuple[uuid.UUID, int], tuple[int, str | None]]:
    """Initialize/Write/Delete response -> {(topic id, partition): (error, message)}."""
    return {(t.topic_id, p.partition): (p.error_code, p.error_message)
            for t in resp.results for p in t.partitions}


def read_results(resp) -> dict[tuple[uuid.UUID, int], ReadStateResult]:
    out = {}
    for t in resp.results:
        for p in t.partitions:
            ext = _extension(p.unknown_tagged_fields) or DeadLetterExtension(next_sequence=0)
            producer = (ext.producer_id, ext.producer_epoch) if ext.producer_id >= 0 else None
            out[(t.topic_id, p.partition)] = ReadStateResult(
                p.error_code, p.error_message, p.state_epoch, p.start_offset,
                _batches(p.state_batches), ext.dead_letters, max(ext.next_sequence, 0), producer)
    return out


def summary_results(resp) -> dict[tuple[uuid.UUID, int], ReadStateSummaryResult]:
    return {(t.topic_id, p.partition): ReadStateSummaryResult(
                p.error_code, p.error_message, p.state_epoch, p.leader_epoch, p.start_offset)
            for t in resp.results for p in t.partitions}
