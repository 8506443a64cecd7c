"""GroupMetadata: the state machine's declared transitions, protocol selection, members."""

from __future__ import annotations

import pytest

from coordinator.group.group import (
    VALID_PREVIOUS_STATES,
    GroupMetadata,
    GroupState,
    IllegalStateTransition,
    MemberMetadata,
    OffsetAndMetadata,
    consumer_subscribed_topics,
)

S = GroupState


def member(mid, protocols, instance=None):
    return MemberMetadata(mid, instance, "c", "/h", 1000, 1000, "consumer",
                          [(p, b"meta-" + p.encode()) for p in protocols])


@pytest.mark.parametrize("target", list(S))
def test_every_transition_follows_the_declared_previous_states(target):
    for source in S:
        g = GroupMetadata("g", source)
        if source in VALID_PREVIOUS_STATES[target]:
            g.transition_to(target)
            assert g.state is target
        else:
            with pytest.raises(IllegalStateTransition):
                g.transition_to(target)
            assert g.state is source


def test_kafka_transitions():
    assert VALID_PREVIOUS_STATES[S.STABLE] == {S.COMPLETING_REBALANCE}
    assert VALID_PREVIOUS_STATES[S.EMPTY] == {S.PREPARING_REBALANCE}
    assert S.DEAD in VALID_PREVIOUS_STATES[S.DEAD]
    assert S.PREPARING_REBALANCE not in VALID_PREVIOUS_STATES[S.PREPARING_REBALANCE]


def test_protocol_selection_by_votes():
    g = GroupMetadata("g")
    g.add(member("a", ["range", "roundrobin"]))
    g.add(member("b", ["roundrobin", "range"]))
    g.add(member("c", ["roundrobin", "range", "sticky"]))
    assert g.candidate_protocols() == {"range", "roundrobin"}
    assert g.select_protocol() == "roundrobin"
    assert g.supports_protocols("consumer", ["sticky", "range"])
    assert not g.supports_protocols("consumer", ["sticky"])
    assert not g.supports_protocols("connect", ["range"])


def test_empty_group_accepts_any_type_with_a_protocol():
    g = GroupMetadata("g")
    assert g.supports_protocols("anything", ["x"])
    assert not g.supports_protocols("", ["x"])
    assert not g.supports_protocols("consumer", [])


def test_leader_moves_when_the_leader_leaves():
    g = GroupMetadata("g")
    g.add(member("a", ["range"]))
    g.add(member("b", ["range"]), callback=lambda r: None)
    assert g.leader_id == "a"
    g.remove("a")
    assert g.leader_id == "b"
    assert g.supported_protocols == {"range": 1}
    g.remove("b")
    assert g.leader_id is None and g.is_empty


def test_init_next_generation():
    g = GroupMetadata("g", S.PREPARING_REBALANCE)
    g.add(member("a", ["range"]))
    g.init_next_generation()
    assert (g.state, g.generation_id, g.protocol_name) == (S.COMPLETING_REBALANCE, 1, "range")
    g.transition_to(S.PREPARING_REBALANCE)
    g.remove("a")
    g.init_next_generation()
    assert (g.state, g.generation_id, g.protocol_name) == (S.EMPTY, 2, None)


def test_offsets_expire_only_when_empty_kip211():
    now = [1000]
    g = GroupMetadata("g", S.EMPTY, lambda: now[0])
    g.protocol_type = "consumer"  # its members left at 1000
    g.offsets[("t", 0)] = OffsetAndMetadata(5, commit_timestamp=500)
    g.offsets[("t", 1)] = OffsetAndMetadata(6, commit_timestamp=3000)
    g.offsets[("t", 2)] = OffsetAndMetadata(7, commit_timestamp=0, expire_timestamp=99999)
    # base = when the group became Empty (1000), whatever the commit time (Kafka)
    assert g.expired_offsets(1999, 1000) == []
    assert sorted(g.expired_offsets(2000, 1000)) == [("t", 0), ("t", 1)]
    assert ("t", 2) in g.expired_offsets(99999, 1000)
    g.state = S.STABLE  # not a consumer-protocol subscription: nothing expires
    assert g.expired_offsets(10**9, 1) == []
    # a simple group (no protocol type): by commit time
    g.state, g.protocol_type = S.EMPTY, None
    assert g.expired_offsets(1500, 1000) == [("t", 0)]


def test_consumer_subscription_topics():
    import struct
    buf = struct.pack(">hi", 1, 2) + struct.pack(">h", 1) + b"a" + struct.pack(">h", 2) + b"bc"
    buf += struct.pack(">i", -1) + struct.pack(">i", 0)
    assert consumer_subscribed_topics(buf) == {"a", "bc"}
    with pytest.raises(ValueError):
        consumer_subscribed_topics(struct.pack(">hi", 0, 5) + struct.pack(">h", 9) + b"x")
