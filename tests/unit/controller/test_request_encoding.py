"""The controller's direct LeaderAndIsr / UpdateMetadata partition-state encoding
(controller/request_encoding.py) against the generated codec, byte for byte."""

from __future__ import annotations

import random
import uuid

import pytest

from controller.request_encoding import (
    LEADER_AND_ISR_VERSION,
    UPDATE_METADATA_VERSION,
    LeaderAndIsrBatch,
    UpdateMetadataBatch,
    lai_partition_state,
    um_partition_state,
)
from controller.zk_data import LeaderIsrAndControllerEpoch as S
from controller.zk_data import ReplicaAssignment
from protocol.messages import LeaderAndIsrRequest, UpdateMetadataRequest

INT32 = (-2**31, -2, -1, 0, 1, 127, 128, 16383, 16384, 2**31 - 1)


def _ids(rng: random.Random, most: int) -> tuple[int, ...]:
    n = rng.choice((0, 1, 3, most))
    return tuple(rng.choice(INT32) if rng.random() < 0.2 else rng.randrange(1000)
                 for _ in range(n))


def _name(rng: random.Random, i: int) -> str:
    return rng.choice((f"t{i}", f"é-{i}-" + "x" * 200, f"topic.{i}_ü"))


def _plain(cls, req):
    """The same request as the generated class (read after the fast encoding)."""
    return cls(**{f.attr: getattr(req, f.attr) for f in cls._schema.fields},
               unknown_tagged_fields=req.unknown_tagged_fields)


@pytest.mark.parametrize("seed", range(6))
def test_leader_and_isr_matches_the_generated_encoder(seed):
    rng = random.Random(seed)
    topics = []
    for i in range(rng.choice((1, 3, 130))):
        parts, encoded = [], []
        for _ in range(rng.choice((0, 1, 5, 140))):
            p = rng.choice(INT32)
            state = S(rng.choice(INT32), rng.choice(INT32), _ids(rng, 6), rng.choice(INT32),
                      rng.choice(INT32), rng.choice((0, 1)))
            assignment = ReplicaAssignment(_ids(rng, 130), _ids(rng, 3), _ids(rng, 3))
            is_new = rng.random() < 0.5
            parts.append((p, state, assignment, is_new))
            encoded.append(lai_partition_state(p, state, assignment, is_new))
        topics.append((_name(rng, i), uuid.UUID(int=rng.getrandbits(128)), parts, encoded))
    live = [LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=b, host_name=f"h{b}", port=b)
            for b in range(rng.choice((0, 2)))]
    req = LeaderAndIsrBatch(topics, controller_id=rng.choice(INT32), controller_epoch=9,
                            broker_epoch=rng.getrandbits(63), type=rng.choice((0, 1)),
                            live_leaders=live)
    fast = req.encode(LEADER_AND_ISR_VERSION)
    plain = _plain(LeaderAndIsrRequest, req)
    assert fast == plain.encode(LEADER_AND_ISR_VERSION)
    assert req.encode(LEADER_AND_ISR_VERSION) == fast  # now through the generated codec
    decoded = LeaderAndIsrRequest.decode(fast, LEADER_AND_ISR_VERSION)
    assert [(t.topic_name, t.topic_id, [
        (ps.partition_index, ps.leader, ps.isr, ps.replicas, ps.is_new)
        for ps in t.partition_states]) for t in decoded.topic_states] == [
        (name, tid, [(p, s.leader, list(s.isr), list(a.replicas), is_new)
                     for p, s, a, is_new in parts]) for name, tid, parts, _ in topics]


@pytest.mark.parametrize("seed", range(6))
def test_update_metadata_matches_the_generated_encoder(seed):
    rng = random.Random(100 + seed)
    topics = []
    for i in range(rng.choice((1, 2, 130))):
        parts, encoded = [], []
        for _ in range(rng.choice((0, 1, 140))):
            entry = (rng.choice(INT32), rng.choice(INT32), rng.choice(INT32), rng.choice(INT32),
                     _ids(rng, 6), rng.choice(INT32), _ids(rng, 130), _ids(rng, 2))
            parts.append(entry)
            encoded.append(um_partition_state(*entry))
        topics.append((_name(rng, i), uuid.UUID(int=rng.getrandbits(128)), parts, encoded))
    brokers = [UpdateMetadataRequest.UpdateMetadataBroker(id=1, rack="r", endpoints=[
        UpdateMetadataRequest.UpdateMetadataEndpoint(port=9092, host="h", listener="PLAINTEXT",
                                                     security_protocol=0)])]
    shared: dict = {}
    copies = [UpdateMetadataBatch(topics, shared, controller_id=1, controller_epoch=3,
                                  broker_epoch=epoch, type=rng.choice((0, 1)),
                                  live_brokers=brokers) for epoch in (-1, 0, 2**40 + 7)]
    for c in copies:
        c.type = copies[0].type
    fast = [c.encode(UPDATE_METADATA_VERSION) for c in copies]
    assert len(shared) == 1
    for c, body in zip(copies, fast, strict=True):
        assert body == _plain(UpdateMetadataRequest, c).encode(UPDATE_METADATA_VERSION)
        assert UpdateMetadataRequest.decode(body, UPDATE_METADATA_VERSION).broker_epoch == \
            c.broker_epoch


def test_reading_or_replacing_topic_states_falls_back_to_the_generated_codec():
    s, a = S(1, 2, (1, 2), 3, 4), ReplicaAssignment((1, 2, 3))
    topics = [("t", uuid.UUID(int=5), [(0, s, a, False)], [lai_partition_state(0, s, a, False)])]
    req = LeaderAndIsrBatch(topics, controller_id=1, controller_epoch=3, broker_epoch=4)
    ps = req.topic_states[0].partition_states[0]
    assert (ps.topic_name, ps.partition_index, ps.isr, ps.replicas) == ("t", 0, [1, 2], [1, 2, 3])
    ps.isr = [1]  # a change to the objects is what gets encoded
    assert LeaderAndIsrRequest.decode(req.encode(7), 7).topic_states[0].partition_states[0] \
        .isr == [1]
    req.topic_states = []
    assert LeaderAndIsrRequest.decode(req.encode(7), 7).topic_states == []
    other = LeaderAndIsrBatch(topics, controller_id=1, controller_epoch=3, broker_epoch=4)
    assert other.encode(6) == _plain(LeaderAndIsrRequest, other).encode(6)  # not the fast path
