"""Metadata responses with encoded topic entries are byte for byte the generated encoding."""

import random
import uuid

import pytest

from broker.handlers.metadata_encoding import (
    MAX_VARIANTS,
    EncodedTopic,
    MetadataResponseWithEncodedTopics,
    cached_entry,
    encode_topic,
)
from broker.metadata_cache import MetadataCache
from protocol import api

MetadataResponse = api.API_KEYS[3].response_cls
Topic = MetadataResponse.MetadataResponseTopic
Partition = MetadataResponse.MetadataResponsePartition


def _topic(rng: random.Random, name: str) -> Topic:
    return Topic(error_code=rng.choice([0, 0, 5]), name=name, topic_id=uuid.uuid4(),
                 is_internal=rng.random() < 0.2, partitions=[
                     Partition(error_code=0, partition_index=p, leader_id=rng.randrange(3),
                               leader_epoch=rng.randrange(9), replica_nodes=[0, 1, 2],
                               isr_nodes=[0, 1][:rng.randrange(3)], offline_replicas=[])
                     for p in range(rng.randrange(40))])


def _fields(version: int, rng: random.Random) -> dict:
    return dict(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=i, host=f"h{i}", port=9092 + i,
                                                         rack=None if i else "r")
                 for i in range(rng.randrange(4))],
        cluster_id="abc", controller_id=rng.randrange(-1, 3), throttle_time_ms=rng.randrange(99),
        cluster_authorized_operations=rng.randrange(1 << 20),
        error_code=0 if version < 13 else rng.choice([0, 58]))


@pytest.mark.parametrize("version", range(0, 14))
def test_encoded_entries_encode_as_the_generated_codec(version):
    rng = random.Random(version)
    for _ in range(5):
        topics = [_topic(rng, f"t{i}") for i in range(rng.randrange(0, 60))]
        fields = _fields(version, rng)
        if version >= 9 and rng.random() < 0.5:
            fields["unknown_tagged_fields"] = {7: b"xyz"}
        want = MetadataResponse(topics=topics, **fields).encode(version)
        mixed = [EncodedTopic(encode_topic(t, version), version) if rng.random() < 0.7 else t
                 for t in topics]
        got = MetadataResponseWithEncodedTopics(topics=mixed, **fields).encode_parts(version)
        assert b"".join(got) == want


def test_an_encoded_entry_reads_like_the_topic():
    t = _topic(random.Random(1), "orders")
    e = EncodedTopic(encode_topic(t, 12), 12)
    assert e.name == "orders" and e.topic_id == t.topic_id
    assert [p.leader_id for p in e.partitions] == [p.leader_id for p in t.partitions]


def test_the_memo_keeps_a_few_variants_and_builds_each_once():
    built = []
    memo: dict = {}

    def build():
        built.append(1)
        return encode_topic(_topic(random.Random(2), "t"), 12)
    for v in range(MAX_VARIANTS + 2):
        cached_entry(memo, (v, "PLAINTEXT", v == 0, v >= 6), build)
    cached_entry(memo, (MAX_VARIANTS + 1, "PLAINTEXT", False, False), build)
    assert len(built) == MAX_VARIANTS + 2 and len(memo) == MAX_VARIANTS


class _PS:
    def __init__(self, p, leader, isr):
        self.partition_index, self.leader, self.leader_epoch = p, leader, 1
        self.isr, self.replicas, self.offline_replicas = isr, [1, 2], []
        self.controller_epoch, self.zk_version = 1, 1


class _TS:
    def __init__(self, topic, states):
        self.topic_name, self.topic_id, self.partition_states = topic, None, states


class _EP:
    def __init__(self, port):
        self.listener, self.host, self.port, self.security_protocol = "PLAINTEXT", "h", port, 0


class _B:
    def __init__(self, i, port=9092):
        self.id, self.endpoints, self.rack = i, [_EP(port)], None


class _UM:
    def __init__(self, topic_states, brokers):
        self.topic_states, self.live_brokers = topic_states, brokers
        self.controller_id, self.controller_epoch, self.type = 1, 1, 0


def test_the_cache_drops_a_topics_memo_when_the_topic_or_the_brokers_change():
    cache = MetadataCache(1)
    cache.update_metadata(_UM([_TS("a", [_PS(0, 1, [1, 2])]), _TS("b", [_PS(0, 2, [2])])],
                              [_B(1), _B(2)]))
    assert cache.topic_memo("nope") is None
    cache.topic_memo("a")["k"] = b"a"
    cache.topic_memo("b")["k"] = b"b"
    cache.update_metadata(_UM([_TS("a", [_PS(0, 2, [2])])], [_B(1), _B(2)]))
    assert cache.topic_memo("a") == {} and cache.topic_memo("b") == {"k": b"b"}
    cache.update_metadata(_UM([], [_B(1), _B(2, port=9999)]))
    assert cache.topic_memo("b") == {}


class _PSx(_PS):
    def __init__(self, p, leader, isr, replicas, offline):
        super().__init__(p, leader, isr)
        self.replicas, self.offline_replicas, self.leader_epoch = replicas, offline, p % 7


async def test_direct_encoding_is_the_generated_encoding():
    """From v7 found topics are written straight from the cache's partition states: the
    same bytes as through TopicMetadata and the generated messages, for leaders that are
    reachable, alive without the listener (LISTENER_NOT_FOUND from v6) and dead
    (LEADER_NOT_AVAILABLE), replica lists of 1-4, offline replicas, many partitions."""
    from broker.handlers.metadata import _encoded_entries, _topic_entry

    rng = random.Random(5)
    other = _B(3)
    other.endpoints[0].listener = "OTHER"  # alive, but not on PLAINTEXT
    states = []
    for p in range(300):
        replicas = rng.sample([1, 2, 3, 4], rng.randrange(1, 5))
        states.append(_PSx(p, rng.choice([1, 2, 3, 4, -1]), replicas[:rng.randrange(1, 5)],
                           replicas, [r for r in replicas if r == 4]))
    cache = MetadataCache(1)
    cache.update_metadata(_UM([_TS("a", states), _TS("__consumer_offsets", states[:3])],
                              [_B(1), _B(2), other]))
    for version in range(0, 14):
        entries, known = await _encoded_entries(cache, ["a", "__consumer_offsets", "x"],
                                                "PLAINTEXT", version)
        assert known == {"a", "__consumer_offsets"}
        for name, entry in zip(["a", "__consumer_offsets"], entries, strict=True):
            tm = cache.get_topic_metadata([name], "PLAINTEXT",
                                          error_unavailable_endpoints=version == 0,
                                          error_unavailable_listeners=version >= 6)[0]
            assert entry.raw == encode_topic(_topic_entry(tm), version), (version, name)
    codes = {p.error_code for p in _topic_entry(cache.get_topic_metadata(
        ["a"], "PLAINTEXT", error_unavailable_listeners=True)[0]).partitions}
    assert codes == {0, 5, 72}
