"""Transactions across three in-process brokers (the replication test bed,
tests/unit/replication/mini_cluster.py): the coordinator (leader of `__transaction_state`)
is broker 1, the data partitions are led by brokers 2 and 3, so WriteTxnMarkers and the
KIP-890 verification (AddPartitionsToTxn verify_only) go over the network. A confluent-kafka
producer (in a thread) commits and aborts; read_committed sees exactly the committed
records on every replica's leader. Then the coordinator's broker stops mid-transaction and
broker 2 takes `__transaction_state` over (a coordinator failover): it loads the replicated
state and the producer's transaction still commits; a data partition's leader change in the
middle of a transaction is survived the same way.
"""

from __future__ import annotations

import asyncio

import pytest

from coordinator.transaction.log_records import TRANSACTION_STATE_TOPIC
from tests.integration.eos_pipeline import read_output
from tests.unit.replication.mini_cluster import MiniCluster, wait_for

pytestmark = pytest.mark.timeout(120)


async def elect_coordinator(cluster: MiniCluster, leader: int, isr=None) -> None:
    await cluster.elect(TRANSACTION_STATE_TOPIC, 0, leader, isr)
    for b, server in cluster.brokers.items():
        coordinator = server.services.transaction_coordinator
        st = cluster.controller.state[(TRANSACTION_STATE_TOPIC, 0)]
        if b == leader:
            coordinator.on_election(0, st.leader_epoch)
        else:
            coordinator.on_resignation(0)


@pytest.fixture
async def cluster(tmp_path):
    c = await MiniCluster.start(tmp_path, n=3, transaction_state_log_num_partitions=1,
                                offsets_topic_num_partitions=1)
    await c.create(TRANSACTION_STATE_TOPIC, [1, 2, 3], configs={"min.insync.replicas": "2"})
    await c.create("__consumer_offsets", [1, 2, 3])
    await c.create("t", [2, 3, 1])
    await c.create("u", [3, 1, 2])
    await elect_coordinator(c, 1)
    yield c
    await c.shutdown()


def bootstrap(cluster: MiniCluster) -> str:
    return ",".join(f"127.0.0.1:{s.services.advertised['PLAINTEXT'].port}"
                    for s in cluster.brokers.values())


def run(fn):
    return asyncio.get_running_loop().run_in_executor(None, fn)


async def transactional_producer(cluster: MiniCluster, txn_id: str, **extra):
    """A confluent-kafka producer, initialized. The test bed advertises its stub controller
    (id 99) as a broker; librdkafka refuses transactions when that is the only broker it is
    connected to, so the producer first talks to the real brokers (a metadata request)."""
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap(cluster), "transactional.id": txn_id,
            "linger.ms": 5, **extra}
    for attempt in range(10):
        p = Producer(conf)
        try:  # the metadata request itself may land on the stub first
            await run(lambda p=p: p.list_topics(timeout=10))
            await run(lambda p=p: p.init_transactions(30))
            return p
        except Exception as e:  # noqa: BLE001 - _UNSUPPORTED_FEATURE: connected to the stub
            if attempt == 9 or "not supported" not in str(e):
                raise
        await asyncio.sleep(0.3)


async def test_markers_and_verification_over_the_network(cluster):
    bs = bootstrap(cluster)
    p = await transactional_producer(cluster, "mb-tx")

    def txn(values, commit):
        p.begin_transaction()
        for v in values:
            p.produce("t", value=v)
            p.produce("u", value=v)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    await run(lambda: txn([b"c1", b"c2"], True))
    await run(lambda: txn([b"a1"], False))
    await run(lambda: txn([b"c3"], True))
    got = await run(lambda: read_output(bs, ["t", "u"], 6, timeout=30, partitions=1, quiet_s=1.0))
    assert sorted(got) == sorted([b"c1", b"c2", b"c3"] * 2)
    coordinator_channel = cluster.brokers[1].services.transaction_coordinator.markers
    assert coordinator_channel.requests_sent >= 3  # WriteTxnMarkers to brokers 2 and 3
    for b in (2, 3):  # markers and aborted index replicated to every replica
        part = cluster.partition(b, "t")
        await wait_for(lambda part=part: part.log.log_end_offset ==
                       cluster.partition(2, "t").log.log_end_offset)
        assert part.log.collect_aborted_transactions(0, part.log.log_end_offset)


async def test_coordinator_and_leader_failover_mid_transaction(cluster):
    bs = bootstrap(cluster)
    p = await transactional_producer(cluster, "fo-tx", **{"transaction.timeout.ms": 60000})

    def begin_and_write(values):
        p.begin_transaction()
        for v in values:
            p.produce("t", value=v)
            p.produce("u", value=v)
        p.flush(30)

    await run(lambda: begin_and_write([b"x1", b"x2"]))
    # every replica holds what was written (the Ongoing state, the records) before the
    # elections below name new leaders from the ISR
    for topic, leader in ((TRANSACTION_STATE_TOPIC, 1), ("t", 2), ("u", 3)):
        end = cluster.partition(leader, topic).log.log_end_offset
        for b in (1, 2, 3):
            await wait_for(lambda b=b, topic=topic, end=end:
                           cluster.partition(b, topic).log.log_end_offset == end,
                           what=f"{topic} replicated to broker {b}")
    await cluster.stop_broker(1)
    # the controller moves leadership off broker 1 and (as after replica.lag.time.max.ms)
    # drops it from the ISRs
    await elect_coordinator(cluster, 2, isr=[2, 3])
    await cluster.elect("t", 0, 3, isr=[3, 2])  # the leader of t moves too
    await cluster.elect("u", 0, 3, isr=[3, 2])
    await run(lambda: p.commit_transaction(60))
    coordinator = cluster.brokers[2].services.transaction_coordinator
    await wait_for(lambda: coordinator.handle_describe("fo-tx")[1] is not None and
                   str(coordinator.handle_describe("fo-tx")[1].state) == "CompleteCommit",
                   what="the new coordinator completed the transaction")
    got = await run(lambda: read_output(bs, ["t", "u"], 4, timeout=30, partitions=1, quiet_s=1.0))
    assert sorted(got) == sorted([b"x1", b"x2"] * 2)
