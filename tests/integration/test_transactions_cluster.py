"""Transactions in a 3-broker ZooKeeper-mode cluster with replication (issue 14).

Exactly-once consume-transform-produce (tests/integration/eos_pipeline.py, confluent-kafka)
over a steady input stream keeps every input record's output exactly once while, in the
middle of the run, the broker coordinating its transactional id - also the leader of an
output partition - is SIGKILLed: a follower of `__transaction_state` loads the replicated
state and finishes or aborts the open transaction, markers go to the new partition leaders,
the producer aborts and redoes what it could not finish. (Should the coordinator lead no
output partition, that broker comes back and the leader of partition 0 is killed next.)
`__transaction_state` and the data topics have replication factor 3 and
min.insync.replicas 2.
"""

from __future__ import annotations

import pytest

from client.connection import KafkaClient
from tests.integration.eos_pipeline import (
    InputFeeder,
    SupervisedWorker,
    check_exactly_once,
    read_output,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PROPS = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.min.isr": "2",
    "offsets.topic.num.partitions": "3",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "replica.lag.time.max.ms": "3000",
    "zookeeper.session.timeout.ms": "3000",  # a killed broker is noticed sooner
    "group.min.session.timeout.ms": "1000",
}


def txn_coordinator(bootstrap: str, txn_id: str) -> int:
    with KafkaClient(bootstrap) as client:
        resp = client.request(10, {"key": txn_id, "key_type": 1}, version=3)
        assert resp.error_code == 0, resp
        return resp.node_id


def wait_full_isr(c) -> None:
    topics = {"ceos-in": 3, "ceos-out": 3, "__transaction_state": 3, "__consumer_offsets": 3}

    def full() -> bool:
        for t, n in topics.items():
            for p in range(n):
                st = c.partition_state(t, p)
                if st is None or len(st["isr"]) < 3:
                    return False
        return True
    c.wait_until("every ISR back to 3 replicas", full, timeout=90)


def test_exactly_once_while_coordinator_and_leader_die(cluster_factory):
    from confluent_kafka.admin import AdminClient, NewTopic
    c = cluster_factory(3, props=PROPS)
    bs = c.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("ceos-in", 3, 3), NewTopic("ceos-out", 3, 3)]
                                 ).values():
        f.result(30)
    c.wait_for_leaders("ceos-out", 3)
    feeder = InputFeeder(bs, "ceos-in", rate=50)
    w = SupervisedWorker(bs, "ceos-group", "ceos-tx", "ceos-in", "ceos-out", batch=10)
    try:
        w.wait_total(60)
        coordinator = txn_coordinator(bs, "ceos-tx")
        leaders = c.wait_for_leaders("ceos-out", 3)
        # one SIGKILL takes the coordinator and (with 3 partitions over 3 brokers, usually)
        # an output partition's leader; else the leader of partition 0 dies afterwards
        c.kill(coordinator)
        w.wait_total(w.total + 60, timeout=120)  # progress under the new coordinator
        assert txn_coordinator(c.bootstrap, "ceos-tx") != coordinator
        if coordinator not in leaders.values():
            c.start_broker(coordinator)
            wait_full_isr(c)  # else a second failure leaves ISRs below min.insync.replicas
            c.kill(c.wait_for_leaders("ceos-out", 3)[0])
            w.wait_total(w.total + 60, timeout=120)
        n = feeder.stop()
        check_exactly_once(read_output(c.bootstrap, "ceos-out", n, timeout=180, partitions=3),
                           n)
    finally:
        feeder.stop()
        w.stop()
