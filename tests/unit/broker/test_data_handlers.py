"""Produce / Fetch / ListOffsets / InitProducerId / OffsetForLeaderEpoch handlers on a real
ReplicaManager (MockTimer), plus every handler's error response in every version."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.fetch_session import FetchSessionCache
from broker.handlers import fetch, list_offsets, offset_for_leader_epoch, produce, producer_id
from broker.handlers.registry import CLOSE_CONNECTION, NO_RESPONSE
from broker.producer_id_manager import ProducerIdManager
from broker.request_channel import PARKED
from controller.zk_data import ProducerIdBlock
from protocol import api
from protocol.errors import ErrorCode, KafkaError
from protocol.legacy_records import build_message_set, iter_legacy_messages
from protocol.messages import (
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
)
from protocol.record_builder import RecordBatchBuilder
from tests.unit.broker.dataplane_helpers import batch, leader_and_isr, make_replica_manager


class FakeController:
    def __init__(self, size=10) -> None:
        self.size = size
        self.next = 0
        self.calls = 0

    async def allocate_producer_ids(self, broker_id):
        self.calls += 1
        start = self.next
        self.next += self.size
        return ProducerIdBlock(broker_id, start, start + self.size - 1)


class NamesOnlyCache:
    def topic_name(self, topic_id):
        return None


@pytest.fixture
async def services(tmp_path):
    rm, timer, lm = make_replica_manager(tmp_path)
    await rm.become_leader_or_follower(leader_and_isr())
    broker = SimpleNamespace(replica_manager=rm, metadata_cache=NamesOnlyCache(), config=None,
                             fetch_session_cache=FetchSessionCache(),
                             producer_id_manager=ProducerIdManager(1, FakeController()))
    yield broker
    await rm.shutdown()
    lm.close_all()


def ctx(broker, version):
    return SimpleNamespace(api_version=version, broker=broker)


def produce_req(records, acks=1, topic="t", partition=0):
    return ProduceRequest(acks=acks, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=records)])])


def fetch_req(offset=0, topic="t"):
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                            FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                                        partition_max_bytes=1 << 20)])])


def code_of(resp) -> int:
    return resp.responses[0].partition_responses[0].error_code


async def test_produce_acks0_success_and_failure(services):
    assert produce.handle_produce(ctx(services, 9), produce_req(batch(1), acks=0)) \
        is NO_RESPONSE
    bad = bytearray(batch(1))
    bad[-1] ^= 1
    assert produce.handle_produce(ctx(services, 9), produce_req(memoryview(bad), acks=0)) \
        is CLOSE_CONNECTION
    assert services.replica_manager.get_partition("t", 0).log_end_offset == 1


async def test_produce_v3_requires_exactly_one_v2_batch(services):
    two = memoryview(bytearray(bytes(batch(1)) + bytes(batch(1))))
    assert code_of(produce.handle_produce(ctx(services, 3), produce_req(two))) == \
        ErrorCode.INVALID_RECORD
    legacy = build_message_set(1, [(0, 1000, b"k", b"v")])
    assert code_of(produce.handle_produce(ctx(services, 3), produce_req(legacy))) == \
        ErrorCode.INVALID_RECORD
    assert code_of(produce.handle_produce(ctx(services, 3), produce_req(None))) == \
        ErrorCode.INVALID_RECORD


async def test_produce_legacy_message_set_is_up_converted(services):
    legacy = build_message_set(1, [(0, 1000, b"k", b"v"), (1, 1001, None, b"w")])
    resp = produce.handle_produce(ctx(services, 2), produce_req(legacy))
    assert code_of(resp) == ErrorCode.NONE
    assert services.replica_manager.get_partition("t", 0).log_end_offset == 2
    garbage = b"\x00" * 16 + b"\x01" + b"\xff" * 20
    assert code_of(produce.handle_produce(ctx(services, 2), produce_req(garbage))) == \
        ErrorCode.CORRUPT_MESSAGE


async def test_produce_unverified_transactional_batch_refused(services):
    # no transactional id, so no KIP-890 verification: the batch may not start a transaction
    b = RecordBatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0,
                           is_transactional=True)
    b.append(1000, b"k", b"v")
    resp = produce.handle_produce(ctx(services, 9), produce_req(memoryview(bytearray(b.build()))))
    assert code_of(resp) == ErrorCode.INVALID_TXN_STATE
    assert "not part of an ongoing transaction" in \
        resp.responses[0].partition_responses[0].error_message


async def test_produce_unknown_topic_and_invalid_acks(services):
    assert code_of(produce.handle_produce(ctx(services, 9), produce_req(batch(1), topic="x"))) \
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert code_of(produce.handle_produce(ctx(services, 9), produce_req(batch(1), acks=3))) \
        == ErrorCode.INVALID_REQUIRED_ACKS


async def test_fetch_down_converts_for_old_versions(services):
    produce.handle_produce(ctx(services, 9), produce_req(batch(2)))
    for version, magic in ((0, 0), (1, 0), (2, 1), (3, 1)):
        resp = fetch.handle_fetch(ctx(services, version), fetch_req())
        records = resp.responses[0].partitions[0].records
        assert {m.magic for m in iter_legacy_messages(records)} == {magic}
        assert [m.offset for m in iter_legacy_messages(records)] == [0, 1]
    resp = fetch.handle_fetch(ctx(services, 11), fetch_req())
    assert resp.responses[0].partitions[0].records.slices  # v4+: file slices, zero copy


async def test_fetch_zstd_to_old_version_is_unsupported(services):
    b = RecordBatchBuilder(compression_type=4)
    b.append(1000, b"k", b"v")
    produce.handle_produce(ctx(services, 9), produce_req(memoryview(bytearray(b.build()))))
    part = fetch.handle_fetch(ctx(services, 3), fetch_req()).responses[0].partitions[0]
    assert part.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


async def test_fetch_parks_and_answers_after_produce(services):
    req = fetch_req()
    req.max_wait_ms = 1000
    fut = fetch.handle_fetch(ctx(services, 11), req)
    assert isinstance(fut, PARKED) and not fut.done()
    produce.handle_produce(ctx(services, 9), produce_req(batch(1)))
    resp = await asyncio.wait_for(fut, 1)  # the handler's future follows at the next tick
    part = resp.responses[0].partitions[0]
    assert part.high_watermark == 1 and len(part.records) > 0


async def test_list_offsets_versions(services):
    produce.handle_produce(ctx(services, 9), produce_req(batch(3)))
    req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="t", partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=0, timestamp=-1, max_num_offsets=10)])])
    resp = list_offsets.handle_list_offsets(ctx(services, 0), req)
    assert resp.topics[0].partitions[0].old_style_offsets == [3, 0]
    p = list_offsets.handle_list_offsets(ctx(services, 5), req).topics[0].partitions[0]
    assert (p.error_code, p.offset, p.leader_epoch) == (0, 3, 0)
    req.topics[0].partitions.append(req.topics[0].partitions[0])
    parts = list_offsets.handle_list_offsets(ctx(services, 5), req).topics[0].partitions
    assert [p.error_code for p in parts] == [ErrorCode.INVALID_REQUEST] * 2
    req.topics[0].name = "nope"
    req.topics[0].partitions.pop()
    assert list_offsets.handle_list_offsets(ctx(services, 5), req).topics[0].partitions[0] \
        .error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_offset_for_leader_epoch(services):
    produce.handle_produce(ctx(services, 9), produce_req(batch(3)))
    req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="t", partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=0, leader_epoch=0)])])
    p = offset_for_leader_epoch.handle_offset_for_leader_epoch(ctx(services, 4), req) \
        .topics[0].partitions[0]
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 3)
    req.topics[0].partitions[0].current_leader_epoch = 7
    p = offset_for_leader_epoch.handle_offset_for_leader_epoch(ctx(services, 4), req) \
        .topics[0].partitions[0]
    assert p.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


async def test_offset_for_leader_epoch_is_answered_by_the_leader_only(services):
    """Kafka's ReplicaManager.lastOffsetForLeaderEpoch reads with fetchOnlyFromLeader = true
    for every version and replica_id: a follower, whose epoch cache may lag the leader's,
    must not answer a consumer's truncation check (v0-v2 carry no replica_id)."""
    produce.handle_produce(ctx(services, 9), produce_req(batch(3)))
    await services.replica_manager.become_leader_or_follower(
        leader_and_isr(leader=2, leader_epoch=1, isr=(2, 1), replicas=(2, 1)))
    for version, replica_id in ((0, -1), (2, -1), (3, -2), (3, -1), (4, -2)):
        req = OffsetForLeaderEpochRequest(replica_id=replica_id, topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="t", partitions=[
                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=0, current_leader_epoch=1, leader_epoch=0)])])
        p = offset_for_leader_epoch.handle_offset_for_leader_epoch(ctx(services, version), req) \
            .topics[0].partitions[0]
        assert (p.error_code, p.leader_epoch, p.end_offset) == \
            (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1), (version, replica_id)


async def test_init_producer_id(services):
    req = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000)
    ids = [(await producer_id.handle_init_producer_id(ctx(services, 4), req)).producer_id
           for _ in range(25)]
    assert ids == list(range(25))
    req.transactional_id = "txn"  # no transaction coordinator in this fixture
    resp = await producer_id.handle_init_producer_id(ctx(services, 4), req)
    assert resp.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and resp.producer_id == -1
    req.transactional_id = ""
    resp = await producer_id.handle_init_producer_id(ctx(services, 4), req)
    assert resp.error_code == ErrorCode.INVALID_REQUEST


async def test_producer_id_manager_prefetches_and_surfaces_store_errors():
    controller = FakeController(size=10)
    m = ProducerIdManager(1, controller)
    for expected in range(9):
        assert await m.generate_producer_id() == expected
    await asyncio.sleep(0)  # the 90% prefetch runs in the background
    assert controller.calls == 2
    assert [await m.generate_producer_id() for _ in range(3)] == [9, 10, 11]

    class Broken:
        async def allocate_producer_ids(self, broker_id):
            raise OSError("disk full")

    with pytest.raises(KafkaError) as e:
        await ProducerIdManager(1, Broken()).generate_producer_id()
    assert e.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await m.shutdown()


REQUESTS = {
    produce: lambda: produce_req(b""),
    fetch: lambda: fetch_req(),
    list_offsets: lambda: ListOffsetsRequest(topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="t", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0)])]),
    producer_id: lambda: InitProducerIdRequest(),
    offset_for_leader_epoch: lambda: OffsetForLeaderEpochRequest(topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="t", partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0)])]),
}


@pytest.mark.parametrize("module", list(REQUESTS), ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_error_response_encodes_in_every_version(module):
    error = KafkaError(ErrorCode.NOT_CONTROLLER, "boom")
    for version in range(module.MIN_VERSION, module.MAX_VERSION + 1):
        resp = module.error_response(REQUESTS[module](), version, error)
        decoded = api.decode_response(module.API_KEY, version,
                                      api.encode_response(resp, version))
        assert ErrorCode.NOT_CONTROLLER in _codes(decoded), (version, decoded)


def _codes(msg) -> list[int]:
    out = []
    for name in ("error_code",):
        if hasattr(msg, name):
            out.append(getattr(msg, name))
    for attr in ("responses", "topics", "partition_responses", "partitions"):
        for child in getattr(msg, attr, None) or []:
            out.extend(_codes(child))
    return out
