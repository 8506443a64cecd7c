"""Hypothesis round trips of every message (requests, responses, headers, data, coordinator
records) at every valid version: decode(encode(x)) == x, including tagged fields, unknown
tagged fields and nulls. Strategies are built from the schema tables."""

from __future__ import annotations

import functools
import math
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.codegen import in_range
from protocol.messages import MESSAGES

_INTS = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
}
_UNKNOWN_TAGS = st.none() | st.dictionaries(st.integers(1000, 1003), st.binary(max_size=4),
                                            min_size=1, max_size=2)


def _scalar(t: str):
    if t in _INTS:
        lo, hi = _INTS[t]
        return st.integers(lo, hi) | st.sampled_from([lo, hi, max(lo, -1), 0])
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "bool":
        return st.booleans()
    if t == "uuid":
        return st.uuids() | st.just(uuid.UUID(int=0))
    if t == "string":
        return st.text(max_size=6)
    if t in ("bytes", "records"):
        return st.binary(max_size=12)
    raise AssertionError(t)


def field_strategy(f, version: int, flexible: bool, unknown: bool = True):
    if f.struct is not None:
        elem = struct_strategy(f.struct, version, flexible, unknown)
    else:
        elem = _scalar(f.elem)
    if f.is_array:
        value = st.lists(elem, max_size=3)
    else:
        value = elem
    if in_range(f.nullable, version):
        value = st.none() | value
    return value


def struct_strategy(schema, version: int, flexible: bool, unknown: bool = True):
    """Values for every field present in `version`; unknown=False: no unknown tagged fields."""
    kwargs = {f.attr: field_strategy(f, version, flexible, unknown)
              for f in schema.fields if in_range(f.versions, version)}
    if flexible and unknown:
        kwargs["unknown_tagged_fields"] = _UNKNOWN_TAGS
    return st.builds(schema.cls, **kwargs)


@functools.cache
def message_strategy(cls, version: int, unknown: bool = True):
    flexible = in_range(cls._schema.flexible, version)
    return struct_strategy(cls._schema, version, flexible, unknown)


def versions(cls) -> range:
    return range(cls.min_version, cls.max_version + 1)


def assert_round_trip(cls, version: int, msg) -> None:
    data = msg.encode(version)
    decoded, end = cls.decode_from(data, version)
    assert end == len(data)
    assert decoded == msg, f"{cls.message_name} v{version}"
    assert decoded.encode(version) == data
    # trailing bytes after the body are left alone
    assert cls.decode(data + b"\x07\x07", version) == msg


@pytest.mark.parametrize("name", sorted(MESSAGES))
@settings(max_examples=4, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_message_round_trips_at_every_version(name, data):
    cls = MESSAGES[name]
    for v in versions(cls):
        msg = data.draw(message_strategy(cls, v), label=f"{name} v{v}")
        assert_round_trip(cls, v, msg)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_default_instance_round_trips_at_every_version(name):
    cls = MESSAGES[name]
    for v in versions(cls):
        msg = cls()
        data = msg.encode(v)
        decoded = cls.decode(data, v)
        # fields absent from v come back as defaults, so a default instance is a fixed point
        # except nullable-only-later fields, which encode None as the empty value
        assert decoded.encode(v) == data


def test_spec_defaults():
    from protocol.messages import (
        FetchRequest,
        JoinGroupRequest,
        MetadataResponse,
        ProduceRequest,
    )

    assert ProduceRequest().transactional_id is None
    assert ProduceRequest().topic_data == []
    assert JoinGroupRequest().rebalance_timeout_ms == -1
    assert JoinGroupRequest().group_instance_id is None
    assert FetchRequest().replica_id == -1
    assert FetchRequest().max_bytes == 0x7FFFFFFF
    assert FetchRequest().isolation_level == 0
    assert FetchRequest().session_epoch == -1
    assert MetadataResponse().cluster_authorized_operations == -(2**31)
    p = FetchRequest.FetchPartition()
    assert p.log_start_offset == -1 and p.current_leader_epoch == -1
    assert FetchRequest.FetchTopic().topic_id == uuid.UUID(int=0)
    # mutable defaults are fresh per instance
    a, b = ProduceRequest(), ProduceRequest()
    a.topic_data.append(1)
    assert b.topic_data == []


def test_tagged_field_written_only_when_not_default():
    from protocol.messages import FetchResponse

    resp = FetchResponse.PartitionData(partition_index=1, records=b"")
    plain = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[resp])])
    base = plain.encode(12)
    resp.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=3, leader_epoch=7)
    tagged = plain.encode(12)
    assert len(tagged) > len(base)
    decoded = FetchResponse.decode(tagged, 12)
    assert decoded.responses[0].partitions[0].current_leader.leader_epoch == 7
    assert FetchResponse.decode(base, 12).responses[0].partitions[0].current_leader == \
        FetchResponse.LeaderIdAndEpoch()


def test_unknown_tagged_fields_are_preserved():
    from protocol.messages import ApiVersionsRequest

    msg = ApiVersionsRequest(client_software_name="x", client_software_version="1",
                             unknown_tagged_fields={5: b"\x01\x02", 900: b""})
    data = msg.encode(3)
    assert ApiVersionsRequest.decode(data, 3).unknown_tagged_fields == {5: b"\x01\x02", 900: b""}


def test_float64_and_uuid_values():
    from protocol.messages import DescribeClientQuotasResponse as R

    e = R.EntryData(entity=[], values=[R.ValueData(key="k", value=math.pi)])
    msg = R(entries=[e])
    assert R.decode(msg.encode(1), 1).entries[0].values[0].value == math.pi


@pytest.mark.parametrize("count", [0, 1, 3, 256, 257, 5000])
def test_fixed_size_arrays_of_any_count(count):
    """Arrays of fixed-size elements are packed and unpacked with a Struct per count (kept
    up to 256 elements, built on demand beyond): every count round trips, in a flexible
    and a non-flexible version, and the bytes are the plain big-endian layout."""
    import struct

    from protocol.codegen import _ARRAY_STRUCTS
    from protocol.messages import LeaderAndIsrRequest as L

    ids = list(range(-1, count - 1))
    state = L.LeaderAndIsrPartitionState(topic_name="t", partition_index=0, isr=ids,
                                         replicas=ids)
    for version in (1, 7):  # compact arrays from v4
        msg = L(controller_id=1, broker_epoch=2, ungrouped_partition_states=[state],
                topic_states=[L.LeaderAndIsrTopicState(topic_name="t", partition_states=[state])])
        data = msg.encode(version)
        back = L.decode(data, version)
        states = back.ungrouped_partition_states if version < 2 else \
            back.topic_states[0].partition_states
        assert states[0].isr == ids and states[0].replicas == ids
        assert struct.pack(f">{count}i", *ids) in data
    assert (count in _ARRAY_STRUCTS["i"]) == (count <= 256)
