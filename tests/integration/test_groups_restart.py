"""Committed offsets and group metadata survive broker restarts (clean SIGTERM and SIGKILL):
they are records in __consumer_offsets, reloaded when the broker leads the partition again.
Consumers resume at the committed offsets; a consumer that stays up across the restart keeps
its membership (the group is reloaded Stable with its generation)."""

from __future__ import annotations

import time

import pytest

TOPIC_PARTITIONS = 4
PER_PARTITION = 50


def _admin(bootstrap):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _setup(bootstrap: str, topic: str) -> None:
    import confluent_kafka
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(topic, TOPIC_PARTITIONS, 1)])[topic].result(30)
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for part in range(TOPIC_PARTITIONS):
        for i in range(PER_PARTITION):
            p.produce(topic, f"{part}-{i}".encode(), partition=part)
    p.flush(30)


def _describe(bootstrap: str, group: str):
    admin = _admin(bootstrap)
    return admin.describe_consumer_groups([group])[group].result(30)


def _consumer(bootstrap: str, group: str, **extra):
    import confluent_kafka

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500}
    conf.update(extra)
    return confluent_kafka.Consumer(conf)


def _consume(consumer, count: int, timeout: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for m in consumer.consume(count - len(out), 0.5):
            if not m.error():
                out.append(m)
    return out


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_committed_offsets_survive_restart(broker_factory, hard):
    import confluent_kafka
    from confluent_kafka import TopicPartition

    b = broker_factory({"group.min.session.timeout.ms": "1000"})
    topic, group = "restart-offsets", "restart-group"
    _setup(b.bootstrap, topic)

    # commit explicit offsets with metadata and leader epochs
    c = _consumer(b.bootstrap, group)
    c.subscribe([topic])
    first = _consume(c, 40)
    assert len(first) == 40
    committed = {p: 10 + 7 * p for p in range(TOPIC_PARTITIONS)}
    c.commit(offsets=[TopicPartition(topic, p, o, metadata=f"meta-{p}")
                      for p, o in committed.items()], asynchronous=False)
    c.close()

    b.restart(hard=hard)

    c = _consumer(b.bootstrap, group)
    got = c.committed([TopicPartition(topic, p) for p in range(TOPIC_PARTITIONS)], timeout=30)
    assert {tp.partition: tp.offset for tp in got} == committed
    assert {tp.partition: tp.metadata for tp in got} == \
        {p: f"meta-{p}" for p in range(TOPIC_PARTITIONS)}
    c.subscribe([topic])
    rest = _consume(c, sum(PER_PARTITION - o for o in committed.values()))
    firsts: dict[int, int] = {}
    for m in rest:
        firsts.setdefault(m.partition(), m.offset())
    assert firsts == committed, "consumer did not resume at the committed offsets"
    assert len({(m.partition(), m.offset()) for m in rest}) == len(rest)
    c.close()

    # the group itself was reloaded: described Empty after its member left
    desc = _describe(b.bootstrap, group)
    assert desc.state == confluent_kafka.ConsumerGroupState.EMPTY


def test_member_stays_in_group_across_a_broker_restart(broker_factory):
    import confluent_kafka

    b = broker_factory({"group.min.session.timeout.ms": "1000"})
    topic, group = "restart-member", "restart-member-group"
    _setup(b.bootstrap, topic)
    c = _consumer(b.bootstrap, group, **{"session.timeout.ms": 20000})
    assigned: list = []
    c.subscribe([topic], on_assign=lambda _c, parts: assigned.append(len(parts)))
    assert len(_consume(c, 100)) == 100
    c.commit(asynchronous=False)
    desc = _describe(b.bootstrap, group)
    member_id = desc.members[0].member_id

    b.restart(hard=True)

    rest = _consume(c, TOPIC_PARTITIONS * PER_PARTITION - 100, timeout=40)
    assert len(rest) == TOPIC_PARTITIONS * PER_PARTITION - 100
    c.commit(asynchronous=False)
    desc = _describe(b.bootstrap, group)
    assert desc.state == confluent_kafka.ConsumerGroupState.STABLE
    assert [m.member_id for m in desc.members] == [member_id]
    assert assigned == [TOPIC_PARTITIONS], "the member had to rejoin after the restart"
    c.close()
