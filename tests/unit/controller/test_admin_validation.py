"""The CreateTopics / CreatePartitions rules both controllers share (controller.admin_validation)."""

from __future__ import annotations

import pytest

from controller import admin_validation as av
from controller.api import CreatableTopic
from protocol.errors import ErrorCode, KafkaError


def _code(fn, *args) -> int:
    with pytest.raises(KafkaError) as e:
        fn(*args)
    return e.value.code


def _round_robin(n: int, rf: int) -> dict[int, list[int]]:
    return {p: [(p + i) % 3 + 1 for i in range(rf)] for p in range(n)}


def test_new_topic_assignment_defaults_explicit_and_errors():
    layout = av.new_topic_assignment
    assert layout(CreatableTopic("t"), [1, 2, 3], 100, 2, 3, _round_robin) == \
        {0: [1, 2, 3], 1: [2, 3, 1]}
    assert layout(CreatableTopic("t", replica_assignment={1: [2], 0: [3]}), [1, 2, 3], 100, 1,
                  1, _round_robin) == {0: [3], 1: [2]}
    both = CreatableTopic("t", 1, -1, {0: [1]})
    assert _code(layout, both, [1], 100, 1, 1, _round_robin) == ErrorCode.INVALID_REQUEST
    too_many = CreatableTopic("t", replica_assignment={p: [1] for p in range(5)})
    assert _code(layout, too_many, [1], 4, 1, 1, _round_robin) == ErrorCode.INVALID_PARTITIONS
    unknown = CreatableTopic("t", replica_assignment={0: [9]})
    assert _code(layout, unknown, [1], 100, 1, 1, _round_robin) == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _code(layout, CreatableTopic("t", 1, 4), [1, 2, 3], 100, 1, 1, _round_robin) == \
        ErrorCode.INVALID_REPLICATION_FACTOR


def test_partition_growth_and_added_assignments():
    av.check_partition_growth(2, 3, 10)
    for current, count in ((3, 2), (3, 3), (3, 11)):
        assert _code(av.check_partition_growth, current, count, 10) == \
            ErrorCode.INVALID_PARTITIONS
    assert av.added_assignments([[1, 2], [2, 3]], 2, 4, [1, 2, 3], 2) == \
        {2: [1, 2], 3: [2, 3]}
    assert _code(av.added_assignments, [[1, 2]], 2, 4, [1, 2, 3], 2) == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _code(av.added_assignments, [[1], [2]], 2, 4, [1, 2, 3], 2) == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
