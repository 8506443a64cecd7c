"""aiokafka's ``test_kip_345_disabled`` sequence against a live broker (issue 27 point 6).

Two dynamic members (KIP-345 static membership off, classic protocol) of one group share a
2-partition topic: consumer1 takes both; consumer2 joins and, the moment its ``start()``
returns, consumer1 must already have its new assignment (its rebalance listener called a
second time) - it is the group leader, whose SyncGroup answer Kafka sends inside the
``__consumer_offsets`` append callback, before any follower's. Then consumer2 unsubscribes,
resubscribes and stops, each a rebalance both listeners see.

The whole sequence runs ``JOSEF_KIP345_RUNS`` times in a row (CI: 5; the issue's check is
50: ``JOSEF_KIP345_RUNS=50 python3 -m pytest -q tests/integration/test_groups_kip345_sequence.py``).
Heartbeats every 300 ms (aiokafka's default is 3 s) keep a run to a few seconds: the
ordering checked does not depend on them.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

RUNS = int(os.environ.get("JOSEF_KIP345_RUNS", "5"))


class _Listener:
    def __init__(self) -> None:
        self.revoked: list[set] = []
        self.assigned: list[set] = []

    def make(self):
        from aiokafka import ConsumerRebalanceListener

        outer = self

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                outer.revoked.append(set(revoked))

            async def on_partitions_assigned(self, assigned):
                outer.assigned.append(set(assigned))

        return Listener()


async def _wait_count(listener: _Listener, n: int, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while len(listener.assigned) <= n:
            await asyncio.sleep(0.05)


async def _sequence(bootstrap: str, topic: str, run: int) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    group = f"kip345-{run}-{uuid.uuid4().hex[:6]}"
    opts = dict(group_id=group, bootstrap_servers=bootstrap, enable_auto_commit=True,
                auto_offset_reset="earliest", heartbeat_interval_ms=300,
                session_timeout_ms=10000)
    consumer1, consumer2 = AIOKafkaConsumer(**opts), AIOKafkaConsumer(**opts)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    l1, l2 = _Listener(), _Listener()
    consumer1.subscribe([topic], listener=l1.make())
    consumer2.subscribe([topic], listener=l2.make())
    try:
        await consumer1.start()
        await consumer1.seek_to_committed()
        assert (l1.revoked, l1.assigned) == ([set()], [{tp0, tp1}]), f"run {run}"
        await consumer2.start()
        await consumer2.seek_to_committed()
        c1, c2 = consumer1.assignment(), consumer2.assignment()
        # the leader (consumer1) was answered first: its second rebalance is complete
        assert len(l1.assigned) == 2 and len(l1.revoked) == 2, \
            f"run {run}: leader heard its SyncGroup answer after the follower"
        assert l1.revoked[-1] == {tp0, tp1} and l1.assigned[-1] == c1, f"run {run}"
        assert (l2.revoked, l2.assigned) == ([set()], [c2]), f"run {run}"
        assert c1 and c2 and c1 | c2 == {tp0, tp1} and not c1 & c2, f"run {run}"

        consumer2.unsubscribe()  # a third rebalance for consumer1 (KIP-345 is off)
        await _wait_count(l1, 2)
        assert len(l1.revoked) == 3 and consumer1.assignment() == {tp0, tp1}, f"run {run}"
        consumer2.subscribe([topic], listener=l2.make())
        await consumer2._subscription.wait_for_assignment()
        await _wait_count(l1, 3)
        await _wait_count(l2, 1)
        assert (len(l2.revoked), len(l2.assigned)) == (2, 2), f"run {run}"
        assert (len(l1.revoked), len(l1.assigned)) == (4, 4), f"run {run}"
        await consumer2.stop()  # yet another rebalance
        await _wait_count(l1, 4)
        assert (len(l1.revoked), len(l1.assigned)) == (5, 5), f"run {run}"
    finally:
        await consumer2.stop()
        await consumer1.stop()


def test_kip_345_disabled_sequence(broker_factory):
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = broker_factory({"group.min.session.timeout.ms": "1000",
                             "offsets.topic.num.partitions": "3"})
    topic = f"kip345-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)

    async def main() -> None:
        for run in range(RUNS):
            await _sequence(broker.bootstrap, topic, run)

    asyncio.run(main())
    assert "Traceback" not in broker.log_text(), broker.log_tail(40)
