"""The Kafka 4.2 versions of the data-plane APIs on a real ReplicaManager: Produce v13
(topic ids, UNKNOWN_TOPIC_ID), ListOffsets v11 (earliest pending upload, and the
UNSUPPORTED_VERSION of a special timestamp older versions lack), Metadata v13's top-level
error in the error response, Fetch v18 (the replica's tagged high watermark)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from broker.fetch_session import FetchSessionCache
from broker.handlers import fetch, list_offsets, metadata, produce
from protocol import api
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import FetchRequest, ListOffsetsRequest, MetadataRequest, ProduceRequest
from tests.unit.broker.dataplane_helpers import (
    TOPIC_ID,
    batch,
    leader_and_isr,
    make_replica_manager,
)


class IdCache:
    """The metadata cache's topic id lookups for the one topic "t"."""

    def topic_name(self, topic_id):
        return "t" if topic_id == TOPIC_ID else None

    def topic_id(self, name):
        return TOPIC_ID if name == "t" else None


@pytest.fixture
async def broker(tmp_path):
    rm, _timer, lm = make_replica_manager(tmp_path)
    await rm.become_leader_or_follower(leader_and_isr())
    yield SimpleNamespace(replica_manager=rm, metadata_cache=IdCache(), config=None,
                          fetch_session_cache=FetchSessionCache())
    await rm.shutdown()
    lm.close_all()


def ctx(broker, version):
    return SimpleNamespace(api_version=version, broker=broker)


def wire(api_key: int, version: int, msg):
    """The message as a client at `version` sees it (fields outside the version drop)."""
    return api.decode_response(api_key, version, api.encode_response(msg, version))


def produce_v13(topic_id, records):
    req = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(topic_id=topic_id, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=records)])])
    return api.decode_request(0, 13, api.encode_request(req, 13))  # the name is not sent


async def test_produce_v13_names_topics_by_id(broker):
    resp = wire(0, 13, produce.handle_produce(ctx(broker, 13), produce_v13(TOPIC_ID, batch(2))))
    topic = resp.responses[0]
    assert topic.topic_id == TOPIC_ID and topic.name == ""
    part = topic.partition_responses[0]
    assert (part.error_code, part.base_offset) == (ErrorCode.NONE, 0)
    assert broker.replica_manager.get_partition("t", 0).log_end_offset == 2


async def test_produce_v13_unknown_topic_id(broker):
    other = uuid.UUID(int=7)
    resp = wire(0, 13, produce.handle_produce(ctx(broker, 13), produce_v13(other, batch(1))))
    assert resp.responses[0].topic_id == other
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert broker.replica_manager.get_partition("t", 0).log_end_offset == 0


async def test_produce_v12_is_v11_outside_transactions(broker):
    req = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0,
                                                                      records=batch(1))])])
    resp = wire(0, 12, produce.handle_produce(ctx(broker, 12), req))
    assert resp.responses[0].name == "t"
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def list_offsets_req(timestamp):
    return ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="t", partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=0, timestamp=timestamp)])])


async def test_list_offsets_v11_earliest_pending_upload_without_tiered_storage(broker):
    produce.handle_produce(ctx(broker, 9), ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch(3))])]))
    p = list_offsets.handle_list_offsets(ctx(broker, 11), list_offsets_req(-6)) \
        .topics[0].partitions[0]
    assert (p.error_code, p.timestamp, p.offset, p.leader_epoch) == (0, -1, -1, -1)
    p = list_offsets.handle_list_offsets(ctx(broker, 11), list_offsets_req(-1)) \
        .topics[0].partitions[0]
    assert (p.error_code, p.offset) == (0, 3)


@pytest.mark.parametrize("timestamp,first", [(-3, 7), (-4, 8), (-5, 9), (-6, 11)])
async def test_list_offsets_special_timestamp_needs_its_version(broker, timestamp, first):
    old = list_offsets.handle_list_offsets(ctx(broker, first - 1), list_offsets_req(timestamp))
    assert old.topics[0].partitions[0].error_code == ErrorCode.UNSUPPORTED_VERSION
    new = list_offsets.handle_list_offsets(ctx(broker, first), list_offsets_req(timestamp))
    assert new.topics[0].partitions[0].error_code == ErrorCode.NONE


def test_metadata_v13_error_response_carries_the_top_level_error():
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")])
    error = KafkaError(ErrorCode.NOT_CONTROLLER, "x")
    resp = wire(3, 13, metadata.error_response(req, 13, error))
    assert resp.error_code == ErrorCode.NOT_CONTROLLER
    assert resp.topics[0].error_code == ErrorCode.NOT_CONTROLLER
    assert wire(3, 12, metadata.error_response(req, 12, error)).error_code == 0  # not in v12


async def test_fetch_v18_reads_as_v17(broker):
    produce.handle_produce(ctx(broker, 9), ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch(2))])]))
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic_id=TOPIC_ID, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20, high_watermark=0)])])
    req = api.decode_request(1, 18, api.encode_request(req, 18))
    assert req.topics[0].partitions[0].high_watermark == 0

    p18, p17 = (fetch.handle_fetch(ctx(broker, v), req).responses[0].partitions[0]
                for v in (18, 17))
    assert (p18.error_code, p18.high_watermark) == (0, 2)
    assert p18.records.read_bytes() == p17.records.read_bytes() and len(p18.records) > 0


async def test_init_producer_id_v6_without_two_phase_commit(broker):
    from broker.handlers import producer_id
    from protocol.messages import InitProducerIdRequest

    broker.transaction_coordinator = None
    req = InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=1000,
                                enable2_pc=True)
    resp = await producer_id.handle_init_producer_id(ctx(broker, 6), req)
    assert resp.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    req = InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=1000,
                                keep_prepared_txn=True)
    resp = await producer_id.handle_init_producer_id(ctx(broker, 6), req)
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    wire = api.decode_response(22, 6, api.encode_response(resp, 6))
    assert (wire.ongoing_txn_producer_id, wire.ongoing_txn_producer_epoch) == (-1, -1)
