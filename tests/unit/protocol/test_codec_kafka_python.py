"""Cross-check with kafka-python 3.0.12's protocol classes (kafka.protocol.*): bytes we
encode decode with theirs to the same values, and their encoding of those values is
byte-identical to ours and decodes with ours."""

from __future__ import annotations

import uuid
import warnings

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from protocol.codegen import in_range
from protocol.messages import MESSAGES, Struct
from tests.unit.protocol.test_codec_roundtrip import message_strategy

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin as k_admin
    import kafka.protocol.consumer as k_consumer
    import kafka.protocol.metadata as k_metadata
    import kafka.protocol.producer as k_producer

_MODULES = (k_metadata, k_producer, k_consumer, k_admin)
APIS = ["Metadata", "Produce", "Fetch", "ApiVersions", "ListOffsets", "FindCoordinator",
        "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch",
        "InitProducerId", "CreateTopics", "DescribeConfigs", "ListGroups",
        "DescribeGroups", "AddPartitionsToTxn", "EndTxn"]
_ZERO = uuid.UUID(int=0)


def _theirs(name: str):
    for mod in _MODULES:
        cls = getattr(mod, name, None)
        if cls is not None:
            return cls
    raise LookupError(name)


CASES = [(api + kind) for api in APIS for kind in ("Request", "Response")]


def _norm(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if v == _ZERO and isinstance(v, uuid.UUID):
        return None
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return v


def _ours_dict(obj: Struct, version: int) -> dict:
    out = {}
    for f in obj._schema.fields:
        if not in_range(f.versions, version):
            continue
        v = getattr(obj, f.attr)
        if isinstance(v, Struct) and in_range(f.tagged, version) and v == type(v)():
            v = None  # an omitted tagged struct: kafka-python decodes it as None
        elif isinstance(v, Struct):
            v = _ours_dict(v, version)
        elif isinstance(v, list) and v and isinstance(v[0], Struct):
            v = [_ours_dict(x, version) for x in v]
        out[f.attr] = _norm(v)
    return out


# kafka-python renames these to `authorized_operations` and decodes them to sets of ACL
# operations; they are still compared through the byte-identical re-encoding.
_RENAMED = {"cluster_authorized_operations", "topic_authorized_operations",
            "authorized_operations"}


def _assert_same(ours: dict, theirs: dict, path: str = "") -> None:
    for key, value in ours.items():
        if key in _RENAMED:
            continue
        assert key in theirs, f"{path}{key} missing in kafka-python's decode"
        other = theirs[key]
        if isinstance(value, dict):
            _assert_same(value, other, f"{path}{key}.")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            assert len(value) == len(other), f"{path}{key}"
            for i, (a, b) in enumerate(zip(value, other, strict=True)):
                _assert_same(a, b, f"{path}{key}[{i}].")
        else:
            assert _norm(other) == value, f"{path}{key}: {other!r} != {value!r}"


@pytest.mark.parametrize("name", CASES)
@settings(max_examples=6, deadline=None, database=None,
          phases=(Phase.explicit, Phase.generate),  # no shrinking: kafka-python is slow
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_cross_check_with_kafka_python(name, data):
    ours_cls = MESSAGES[name]
    theirs_cls = _theirs(name)
    lo = max(ours_cls.min_version, theirs_cls.min_version)
    hi = min(ours_cls.max_version, theirs_cls.max_version)
    assert lo <= hi
    for version in range(lo, hi + 1):
        msg = data.draw(message_strategy(ours_cls, version, False), label=f"v{version}")
        if name == "ApiVersionsResponse":
            # kafka-python re-parses an ApiVersions error response as v0 (KIP-511 fallback)
            msg.error_code = 0
        encoded = msg.encode(version)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            theirs = theirs_cls.decode(encoded, version=version)
            _assert_same(_ours_dict(msg, version), theirs.to_dict(json=False))
            their_bytes = bytes(theirs.encode())  # keeps the decoded version
        assert their_bytes == encoded, f"{name} v{version}"
        assert ours_cls.decode(their_bytes, version) == msg


def test_hand_built_kafka_python_requests_decode_with_ours():
    from protocol.messages import FetchRequest, MetadataRequest

    KM = _theirs("MetadataRequest")
    k = KM(topics=[KM.MetadataRequestTopic(name="orders")], allow_auto_topic_creation=False,
           version=4)
    ours = MetadataRequest.decode(bytes(k.encode(version=4)), 4)
    assert [t.name for t in ours.topics] == ["orders"]
    assert ours.allow_auto_topic_creation is False

    KF = _theirs("FetchRequest")
    part = KF.FetchTopic.FetchPartition(partition=2, fetch_offset=100, partition_max_bytes=1024)
    k = KF(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
           topics=[KF.FetchTopic(topic="orders", partitions=[part])], version=11)
    ours = FetchRequest.decode(bytes(k.encode(version=11)), 11)
    p = ours.topics[0].partitions[0]
    assert (ours.topics[0].topic, p.partition, p.fetch_offset, p.partition_max_bytes) == \
        ("orders", 2, 100, 1024)
    assert ours.isolation_level == 1 and ours.max_wait_ms == 500
