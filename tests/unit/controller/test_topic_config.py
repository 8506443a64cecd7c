"""Topic-config validation and IncrementalAlterConfigs operations."""

import pytest

from controller.topic_config import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    apply_incremental,
    validate_topic_config,
)
from protocol.errors import ErrorCode, KafkaError


@pytest.mark.parametrize("name,value", [
    ("retention.ms", "-1"), ("retention.ms", "604800000"), ("retention.bytes", "-1"),
    ("segment.bytes", "14"), ("cleanup.policy", "compact,delete"), ("compression.type", "zstd"),
    ("message.timestamp.type", "LogAppendTime"), ("min.cleanable.dirty.ratio", "0.5"),
    ("preallocate", "TRUE"), ("max.message.bytes", "2147483647"), ("min.insync.replicas", "1"),
    ("compression.gzip.level", "-1"), ("compression.gzip.level", "9"),
])
def test_valid(name, value):
    assert validate_topic_config({name: value}) == {name: value}


@pytest.mark.parametrize("name,value", [
    ("retention.ms", "-2"), ("retention.ms", "x"), ("segment.bytes", "13"),
    ("cleanup.policy", "compact,zap"), ("compression.type", "brotli"),
    ("message.timestamp.type", "Now"), ("min.cleanable.dirty.ratio", "1.5"),
    ("preallocate", "yes"), ("max.message.bytes", "2147483648"), ("min.insync.replicas", "0"),
    ("compression.gzip.level", "0"), ("unknown.key", "1"), ("segment.ms", None),
])
def test_invalid(name, value):
    with pytest.raises(KafkaError) as e:
        validate_topic_config({name: value})
    assert e.value.code == ErrorCode.INVALID_CONFIG and name in e.value.message


def test_incremental_ops():
    cur = {"cleanup.policy": "delete", "retention.ms": "5"}
    assert apply_incremental(cur, [("cleanup.policy", OP_APPEND, "compact,delete")]) == {
        "cleanup.policy": "delete,compact", "retention.ms": "5"}
    assert apply_incremental(cur, [("cleanup.policy", OP_SUBTRACT, "delete"),
                                   ("retention.ms", OP_DELETE, None),
                                   ("segment.ms", OP_SET, "100")]) == {"segment.ms": "100"}
    assert cur == {"cleanup.policy": "delete", "retention.ms": "5"}  # input untouched
    for ops, code in [([("retention.ms", OP_APPEND, "1")], ErrorCode.INVALID_REQUEST),
                      ([("retention.ms", 9, "1")], ErrorCode.INVALID_REQUEST),
                      ([("nope", OP_SET, "1")], ErrorCode.INVALID_CONFIG),
                      ([("retention.ms", OP_SET, None)], ErrorCode.INVALID_CONFIG)]:
        with pytest.raises(KafkaError) as e:
            apply_incremental(cur, ops)
        assert e.value.code == code
