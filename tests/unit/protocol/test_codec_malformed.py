"""Malformed input gets typed errors from protocol.errors, never IndexError, struct.error,
UnicodeDecodeError or MemoryError."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.api import API_KEYS, decode_request, decode_response
from protocol.errors import (
    ErrorCode,
    InvalidLengthError,
    InvalidStringError,
    ProtocolError,
    TruncatedError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from protocol.messages import (
    ApiVersionsRequest,
    FindCoordinatorRequest,
    MetadataRequest,
    ProduceRequest,
)
from protocol.types import decode_unsigned_varint, decode_varint, decode_varlong


def test_unknown_api_key():
    with pytest.raises(UnknownApiKeyError) as info:
        decode_request(999, 0, b"")
    assert info.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(UnknownApiKeyError):
        decode_response(-5, 0, b"")


@pytest.mark.parametrize("version", [-1, 14, 32767])
def test_unsupported_version(version):
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(0, version, b"\x00" * 64)
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    with pytest.raises(UnsupportedVersionError):
        ProduceRequest().encode(version)


def test_truncated_fixed_fields():
    with pytest.raises(TruncatedError) as info:
        ProduceRequest.decode(b"\x00\x01\x00", 0)  # acks, then half a timeout
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_negative_length_in_non_nullable_string():
    # FindCoordinator v0: key STRING; -2 is not a valid length, -1 is null (not allowed here)
    for n in (-1, -2, -32768):
        with pytest.raises(InvalidLengthError):
            FindCoordinatorRequest.decode(struct.pack(">h", n), 0)


def test_negative_length_other_than_minus_one_in_nullable_string():
    # Produce v3: transactional_id NULLABLE_STRING
    with pytest.raises(InvalidLengthError):
        ProduceRequest.decode(struct.pack(">h", -7) + b"\x00" * 20, 3)


def test_string_length_past_the_end():
    with pytest.raises(TruncatedError):
        FindCoordinatorRequest.decode(struct.pack(">h", 100) + b"abc", 0)
    # compact string (v3): uvarint 101 -> 100 bytes
    with pytest.raises(TruncatedError):
        FindCoordinatorRequest.decode(b"\x65abc", 3)


def test_records_length_past_the_end():
    body = (struct.pack(">hi", 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
            + struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 10_000) + b"x")
    with pytest.raises(TruncatedError):
        ProduceRequest.decode(body, 2)


def test_negative_array_count():
    # Metadata v0: topics ARRAY (not nullable in v0)
    with pytest.raises(InvalidLengthError):
        MetadataRequest.decode(struct.pack(">i", -1), 0)
    with pytest.raises(InvalidLengthError):
        MetadataRequest.decode(struct.pack(">i", -3), 1)


@pytest.mark.parametrize("version", [0, 1, 9, 12])
def test_huge_array_count_is_rejected_without_allocating(version):
    if version >= 9:
        body = b"\xfe\xff\xff\xff\x07" + b"\x00" * 8  # compact count 2**31 - 2
    else:
        body = struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 8
    start = time.perf_counter()
    with pytest.raises(InvalidLengthError):
        MetadataRequest.decode(body, version)
    assert time.perf_counter() - start < 0.5


def test_huge_int32_array_count():
    # ElectLeaders v0: TopicPartitions[] { Topic STRING, Partitions []int32 }, 2**30 int32s
    from protocol.messages import ElectLeadersRequest

    body = struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0x40000000)
    with pytest.raises(InvalidLengthError):
        ElectLeadersRequest.decode(body + b"\x00" * 16, 0)


def test_invalid_utf8():
    with pytest.raises(InvalidStringError) as info:
        FindCoordinatorRequest.decode(struct.pack(">h", 2) + b"\xff\xfe", 0)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    # compact string
    with pytest.raises(InvalidStringError):
        ApiVersionsRequest.decode(b"\x03\xc3\x28\x01\x00", 3)


def test_varint_too_long():
    with pytest.raises(InvalidLengthError):
        decode_unsigned_varint(memoryview(b"\xff" * 6), 0)
    with pytest.raises(InvalidLengthError):
        decode_varlong(memoryview(b"\xff" * 11), 0)
    with pytest.raises(TruncatedError):
        decode_varint(memoryview(b"\xff\xff"), 0)
    with pytest.raises(InvalidLengthError):
        ApiVersionsRequest.decode(b"\xff" * 8, 3)


def test_tagged_field_past_the_end():
    # ApiVersions v3: two empty compact strings, then 1 tagged field of 50 bytes
    with pytest.raises(TruncatedError):
        ApiVersionsRequest.decode(b"\x01\x01\x01\x05\x32abc", 3)


_TARGETS = [(k, v) for k, spec in API_KEYS.items()
            for v in {spec.min_version, spec.max_version, spec.flexible_min_version or 0}
            if spec.min_version <= v <= spec.max_version]


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(_TARGETS), body=st.binary(max_size=64),
       response=st.booleans())
def test_random_bytes_never_crash(target, body, response):
    api_key, version = target
    decode = decode_response if response else decode_request
    try:
        decode(api_key, version, body)
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None, database=None)
@given(body=st.binary(min_size=1, max_size=40), flip=st.integers(0, 39), value=st.integers(0, 255))
def test_corrupted_valid_produce_request_never_crashes(body, flip, value):
    msg = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
        name="topic", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=body)])])
    for version in (2, 9):
        data = bytearray(msg.encode(version))
        data[flip % len(data)] = value
        try:
            ProduceRequest.decode(bytes(data), version)
        except ProtocolError:
            pass
