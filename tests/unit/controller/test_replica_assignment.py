"""Replica assignment exactly as Kafka's AdminUtils.assignReplicasToBrokers (seeded starts)."""

import random

import pytest

from controller.replica_assignment import (
    RACK_AWARE_DISABLED,
    RACK_AWARE_ENFORCED,
    RACK_AWARE_SAFE,
    assign_replicas_to_brokers,
    broker_metadatas,
    rack_alternated_broker_list,
)
from protocol.errors import ErrorCode, KafkaError

RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def _metas(racks):
    return sorted(racks.items())


def test_rack_alternated_broker_list():
    assert rack_alternated_broker_list(RACKS) == [0, 3, 1, 5, 4, 2]
    without_5 = {b: r for b, r in RACKS.items() if b != 5}
    assert rack_alternated_broker_list(without_5) == [0, 3, 1, 4, 2]
    # the example: racks a and b holding 0,1,2 and 3,4,5
    assert rack_alternated_broker_list({0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}) == \
        [0, 3, 1, 4, 2, 5]


def test_rack_aware_assignment_with_fixed_start_matches_kafka():
    assert assign_replicas_to_brokers(_metas(RACKS), 7, 3, 0, 0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3],
        6: [0, 4, 2]}


def test_rack_unaware_assignment_with_fixed_start_matches_kafka():
    assert assign_replicas_to_brokers([(b, None) for b in range(5)], 10, 3, 0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


@pytest.mark.parametrize("seed", range(20))
def test_random_start_keeps_racks_and_balance(seed):
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    out = assign_replicas_to_brokers(_metas(racks), 6, 3, rng=random.Random(seed))
    assert sorted(out) == list(range(6))
    for replicas in out.values():
        assert len(set(replicas)) == 3
        assert len({racks[b] for b in replicas}) == 3  # one replica per rack
    leaders = [rs[0] for rs in out.values()]
    assert sorted(leaders) == list(range(6))  # every broker leads exactly one
    counts = [sum(b in rs for rs in out.values()) for b in racks]
    assert counts == [3] * 6


def test_start_partition_id_continues_numbering():
    out = assign_replicas_to_brokers([(b, None) for b in range(3)], 2, 2, 0, 6)
    assert sorted(out) == [6, 7]


def test_errors():
    brokers = [(1, None), (2, None)]
    for n, rf, code in ((0, 1, ErrorCode.INVALID_PARTITIONS),
                        (1, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
                        (1, 3, ErrorCode.INVALID_REPLICATION_FACTOR)):
        with pytest.raises(KafkaError) as e:
            assign_replicas_to_brokers(brokers, n, rf)
        assert e.value.code == code
    with pytest.raises(KafkaError) as e:
        assign_replicas_to_brokers(brokers, 3, 3)
    assert "larger than available brokers: 2" in e.value.message


def test_broker_metadatas_modes():
    mixed = [(3, "a"), (1, None), (2, "b")]
    with pytest.raises(KafkaError) as e:
        broker_metadatas(mixed, RACK_AWARE_ENFORCED)
    assert e.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert broker_metadatas(mixed, RACK_AWARE_SAFE) == [(1, None), (2, None), (3, None)]
    assert broker_metadatas([(2, "b"), (1, "a")], RACK_AWARE_SAFE) == [(1, "a"), (2, "b")]
    assert broker_metadatas([(2, "b")], RACK_AWARE_DISABLED) == [(2, None)]
