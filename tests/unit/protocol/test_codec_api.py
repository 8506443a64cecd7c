"""protocol.api: the API table, body codecs by api key, encode_response_parts, and the
coordinator record framing of protocol.coordinator_records."""

from __future__ import annotations

import pytest

from protocol import coordinator_records as cr
from protocol.api import (
    API_KEYS,
    ApiSpec,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
)
from protocol.errors import UnsupportedVersionError
from protocol.messages import (
    FetchResponse,
    GroupMetadataKey,
    GroupMetadataValue,
    MetadataRequest,
    OffsetCommitKey,
    OffsetCommitValue,
    ProduceRequest,
    TransactionLogKey,
    TransactionLogValue,
)


def test_api_table():
    # 0..87 from Kafka 4.0's specs, 88..92 (streams groups, share-group offsets) from 4.2's
    assert len(API_KEYS) == 93 and sorted(API_KEYS) == list(range(93))
    produce = API_KEYS[0]
    assert isinstance(produce, ApiSpec)
    assert (produce.name, produce.min_version, produce.max_version,
            produce.flexible_min_version) == ("Produce", 0, 13, 9)
    assert produce.request_cls is ProduceRequest
    assert API_KEYS[17].flexible_min_version is None  # SaslHandshake
    assert API_KEYS[1].response_cls is FetchResponse
    assert API_KEYS[3].is_flexible(9) and not API_KEYS[3].is_flexible(8)


def test_request_and_response_by_api_key():
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")])
    assert decode_request(3, 12, encode_request(req, 12)) == req
    resp = FetchResponse(session_id=5)
    assert decode_response(1, 13, encode_response(resp, 13)) == resp
    data = b"\x99\x99" + encode_request(req, 4) + b"\x00\x00\x00"  # offset + trailing bytes
    assert decode_request(3, 4, data, 2) == req


class FakeFileRecords:
    """Stands in for storage's FileRecords: has __len__, is not bytes-like."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


def _fetch_response(records_a, records_b) -> FetchResponse:
    P = FetchResponse.PartitionData
    return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[P(partition_index=0, high_watermark=10, records=records_a),
                               P(partition_index=1, records=None),
                               P(partition_index=2, records=records_b)])])


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_encode_response_parts_splices_file_records(version):
    a, b = b"A" * 70, b"B" * 300
    parts = encode_response_parts(_fetch_response(FakeFileRecords(a), FakeFileRecords(b)),
                                  version)
    assert [type(p) for p in parts] == [bytes, FakeFileRecords, bytes, FakeFileRecords, bytes]
    joined = b"".join(p.data if isinstance(p, FakeFileRecords) else p for p in parts)
    assert joined == encode_response(_fetch_response(a, b), version)
    decoded = decode_response(1, version, joined)
    assert bytes(decoded.responses[0].partitions[2].records) == b


def test_encode_response_parts_with_bytes_only_is_one_segment():
    msg = _fetch_response(b"x", b"y")
    assert encode_response_parts(msg, 12) == [encode_response(msg, 12)]


def test_plain_encode_rejects_non_bytes_records():
    with pytest.raises(TypeError):
        encode_response(_fetch_response(FakeFileRecords(b"x"), None), 12)


def test_repr_is_useful():
    r = repr(_fetch_response(b"abc", None))
    assert r.startswith("FetchResponse(throttle_time_ms=0")
    assert "FetchResponse.PartitionData(partition_index=0" in r
    decoded = FetchResponse.decode(_fetch_response(b"abc", None).encode(12), 12)
    assert "records=<memoryview 3 bytes>" in repr(decoded)


def test_nested_classes_are_attached_to_the_message():
    assert ProduceRequest.TopicProduceData.__qualname__ == "ProduceRequest.TopicProduceData"
    assert ProduceRequest.PartitionProduceData().records is None
    with pytest.raises(TypeError):
        ProduceRequest(1)  # keyword-only
    with pytest.raises(AttributeError):
        ProduceRequest().no_such_field = 1  # __slots__


def test_offset_commit_records():
    key = OffsetCommitKey(group="g", topic="t", partition=3)
    kb = cr.encode_key(key)
    assert kb[:2] == b"\x00\x01"
    assert cr.decode_group_key(kb) == (key, 1)
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1000)
    for v in range(5):
        vb = cr.encode_value(value, v)
        decoded, version = cr.decode_value(OffsetCommitKey, vb)
        assert version == v and decoded.offset == 42 and decoded.metadata == "m"
    assert cr.decode_value(OffsetCommitKey, None) == (None, None)
    assert cr.encode_value(None) is None


def test_group_metadata_records():
    key = GroupMetadataKey(group="g")
    kb = cr.encode_key(key)
    assert kb[:2] == b"\x00\x02"
    k, v = cr.decode_group_key(kb)
    assert k == key and cr.value_class(type(k)) is GroupMetadataValue
    member = GroupMetadataValue.MemberMetadata(member_id="m", client_id="c", client_host="/h",
                                               session_timeout=10, subscription=b"s",
                                               assignment=b"a")
    value = GroupMetadataValue(protocol_type="consumer", generation=2, protocol="range",
                               leader="m", current_state_timestamp=7, members=[member])
    decoded, version = cr.decode_value(GroupMetadataKey, cr.encode_value(value, 3))
    assert version == 3 and decoded == value


def test_transaction_log_records():
    key = TransactionLogKey(transactional_id="tx")
    assert cr.decode_transaction_key(cr.encode_key(key)) == key
    value = TransactionLogValue(producer_id=9, producer_epoch=1, transaction_timeout_ms=100,
                                transaction_status=2, transaction_partitions=[
                                    TransactionLogValue.PartitionsSchema(topic="t",
                                                                         partition_ids=[0, 1])])
    decoded, version = cr.decode_value(TransactionLogKey, cr.encode_value(value))
    assert version == 1 and decoded == value


def test_unknown_group_key_version():
    with pytest.raises(UnsupportedVersionError):
        cr.decode_group_key(b"\x00\x63\x00\x00")
