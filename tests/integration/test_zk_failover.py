"""ZooKeeper mode, faults: controller failover (kill -9), a paused controller fenced by the
controller epoch, broker epochs (KIP-380), startup refusals, malformed znodes, ZooKeeper
paused, topic deletion with a broker down.

One ZooKeeper and one 3-broker cluster for the module; every test leaves the three brokers
running. Sessions time out after 6 s (``zookeeper.session.timeout.ms`` of the fixture).
"""

from __future__ import annotations

import json
import time

import pytest

from client.connection import KafkaClient
from protocol.messages import LeaderAndIsrRequest
from storage.checkpoints import write_meta_properties
from tests.integration.cluster import Cluster
from tests.integration.harness import BrokerProcess, BrokerStartError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

LEADER_AND_ISR, CREATE_TOPICS = 4, 19
STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH = 11, 77


def _create(c: Cluster, topic: str, partitions: int, rf: int) -> dict[int, int]:
    with KafkaClient(c.broker(c.controller_id()).bootstrap) as k:
        resp = k.request(CREATE_TOPICS, {"topics": [{
            "name": topic, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [], "configs": []}], "timeout_ms": 20000}, version=5)
    assert resp.topics[0].error_code == 0, resp
    return c.wait_metadata_converged([topic])[topic]


def _states(c: Cluster, topic: str, partitions: int) -> dict[int, tuple[dict, int]]:
    out = {}
    for p in range(partitions):
        raw, stat = c.zk_get(f"/brokers/topics/{topic}/partitions/{p}/state")
        out[p] = (json.loads(raw), stat.mzxid)
    return out


def _broker_epoch(c: Cluster, broker_id: int) -> int:
    return c.zk_get(f"/brokers/ids/{broker_id}")[1].czxid


def test_second_broker_with_the_same_id_fails_startup(zk_cluster, tmp_path):
    c = zk_cluster
    props = dict(c.broker(2).props)
    b = BrokerProcess(tmp_path / "dup", props, broker_id=2, startup_timeout=30)
    try:
        with pytest.raises(BrokerStartError):
            b.start()
        log = b.log_text()
        assert "Error while creating ephemeral at /brokers/ids/2, node already exists and " \
               "owner" in log, log[-2000:]
        assert b.proc.returncode == 1
    finally:
        b.kill()
    assert c.registered_brokers() == [1, 2, 3]


def test_broker_of_another_cluster_refuses_to_start(zk_cluster, tmp_path):
    c = zk_cluster
    # log dirs that belonged to another cluster (meta.properties names its cluster id) ...
    b = BrokerProcess(tmp_path / "stranger", dict(c.broker(1).props), broker_id=7,
                      startup_timeout=30)
    b.log_dir.mkdir(parents=True)
    write_meta_properties(str(b.log_dir), 7, "AAAAAAAAAAAAAAAAAAAAAA")
    # ... refuse to join this one (Kafka's InconsistentClusterIdException)
    with pytest.raises(BrokerStartError):
        b.start()
    log = b.log_text()
    assert "doesn't match stored clusterId Some(AAAAAAAAAAAAAAAAAAAAAA)" in log, log[-2000:]
    assert "The broker is trying to join the wrong cluster" in log
    assert b.proc.returncode == 1
    assert c.registered_brokers() == [1, 2, 3]


def test_malformed_znodes_are_logged_and_skipped(zk_cluster):
    c = zk_cluster
    zk = c.zk()
    zk.create("/brokers/topics/zk-garbage", b"{not json")
    zk.create("/config/changes/config_change_", b"\x00\xff", sequence=True)
    topic = "zk-after-garbage"
    leaders = _create(c, topic, 3, 3)  # the controller still works
    assert sorted(leaders) == [0, 1, 2]
    cid = c.controller_id()
    c.wait_until("the controller logs the bad topic znode", lambda: "zk-garbage" in
                 c.broker(cid).log_text())
    assert "skipping malformed topic znode /brokers/topics/zk-garbage" in \
        c.broker(cid).log_text()
    for i in c.ids:
        assert c.broker(i).is_running()
    zk.delete("/brokers/topics/zk-garbage")


def test_kill_controller_fails_over_within_session_timeout(zk_cluster):
    c = zk_cluster
    topic = "zk-failover"
    _create(c, topic, 6, 3)
    old, epoch = c.controller_id(), c.controller_epoch()
    led = {p for p, (st, _) in _states(c, topic, 6).items() if st["leader"] == old}
    assert led  # the spread assignment gives every broker some leaderships
    killed_at = time.monotonic()
    c.kill(old)
    new = c.wait_for_controller(exclude=[old], timeout=c.session_timeout_ms / 1000 + 5)
    elapsed = time.monotonic() - killed_at
    assert elapsed <= c.session_timeout_ms / 1000 + 2, elapsed
    assert c.controller_epoch() == epoch + 1
    leaders = c.wait_for_leaders(topic, 6, exclude=[old])
    for p, (st, _) in _states(c, topic, 6).items():
        assert st["leader"] != old and st["leader"] in st["isr"] and old not in st["isr"]
        assert st["controller_epoch"] == epoch + 1 or p not in led
    c.wait_metadata_converged([topic])
    # the killed broker comes back: it registers again (new broker epoch) and rejoins
    c.start_broker(old)
    c.wait_for_brokers_registered([1, 2, 3])
    assert c.controller_id() == new
    c.wait_metadata_converged([topic])
    del leaders


def test_paused_controller_is_fenced_after_its_session_expired(zk_cluster):
    c = zk_cluster
    topic = "zk-fencing"
    _create(c, topic, 6, 3)
    old, epoch = c.controller_id(), c.controller_epoch()
    before = {b: _broker_epoch(c, b) for b in c.ids}
    c.pause(old)
    try:
        c.wait_for_controller(exclude=[old], timeout=c.session_timeout_ms / 1000 + 10)
        assert c.controller_epoch() == epoch + 1
        c.wait_for_leaders(topic, 6, exclude=[old])
        snapshot = _states(c, topic, 6)
    finally:
        c.resume(old)
    # the deposed controller wakes up, resigns, registers again with a new broker epoch
    c.wait_for_brokers_registered([1, 2, 3])
    c.wait_until("the old controller re-registered",
                 lambda: _broker_epoch(c, old) > before[old])
    c.wait_until("the old controller resigned", lambda: "Resigned" in
                 c.broker(old).log_text())
    c.wait_metadata_converged([topic])
    assert c.controller_epoch() == epoch + 1
    # it wrote nothing: every state written since carries the new controller's epoch
    for p, (st, mzxid) in _states(c, topic, 6).items():
        if mzxid != snapshot[p][1]:
            assert st["controller_epoch"] == epoch + 1, (p, st)
    # and brokers reject its LeaderAndIsr (old controller epoch), and stale broker epochs
    target = next(b for b in c.ids if b != old)
    current_epoch = _broker_epoch(c, target)
    st = c.partition_state(topic, 0)
    for controller_epoch, broker_epoch, want in ((epoch, current_epoch, STALE_CONTROLLER_EPOCH),
                                                 (epoch + 1, current_epoch - 1,
                                                  STALE_BROKER_EPOCH)):
        req = LeaderAndIsrRequest(
            controller_id=old, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
            type=0, topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name=topic, topic_id=c.metadata(target, [topic]).topics[0].topic_id,
                partition_states=[LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                    topic_name=topic, partition_index=0, controller_epoch=controller_epoch,
                    leader=old, leader_epoch=st["leader_epoch"] + 5, isr=[old],
                    partition_epoch=99, replicas=[old], adding_replicas=[],
                    removing_replicas=[], is_new=False)])],
            live_leaders=[])
        with KafkaClient(c.broker(target).bootstrap) as k:
            resp = k.request(LEADER_AND_ISR, req, version=7)
        assert resp.error_code == want
        assert all(p.error_code == want for t in resp.topics for p in t.partition_errors)
    assert c.partition_state(topic, 0) == st  # nothing changed


def test_topic_deletion_waits_for_a_dead_broker_and_finishes_when_it_returns(zk_cluster):
    from confluent_kafka.admin import AdminClient

    c = zk_cluster
    topic = "zk-delete-down"
    _create(c, topic, 3, 3)
    victim = next(b for b in c.ids if b != c.controller_id())
    c.stop_broker(victim)  # down (its registration goes with its session)
    c.wait_until("the stopped broker deregistered",
                 lambda: victim not in c.registered_brokers(), timeout=20)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    for f in admin.delete_topics([topic], request_timeout=30).values():
        f.result(timeout=30)  # answered once the topic left the metadata
    time.sleep(1.0)
    assert c.zk_get(f"/brokers/topics/{topic}") is not None  # waits for the dead replica
    assert topic in c.zk_children("/admin/delete_topics")
    c.start_broker(victim)
    c.wait_until("the deletion finished", lambda: c.zk_get(f"/brokers/topics/{topic}") is None,
                 timeout=30)
    assert topic not in c.zk_children("/admin/delete_topics")
    c.wait_until("the returning broker deleted its log", lambda: not list(
        c.broker(victim).log_dir.glob(f"{topic}-[0-9]")))
    c.wait_metadata_converged([])


def test_zookeeper_paused_brokers_keep_serving(zk_cluster, zookeeper):
    from kafka import KafkaProducer

    c = zk_cluster
    topic = "zk-paused-zk"
    leaders = _create(c, topic, 3, 1)
    zookeeper.pause()
    try:
        for i in c.ids:  # metadata from the last known state
            md = c.metadata(i, [topic])
            assert {p.partition_index: p.leader_id for p in md.topics[0].partitions} == leaders
        # no idempotence: InitProducerId needs ZooKeeper (a producer-id block), as in Kafka
        producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all",
                                 enable_idempotence=False)
        for p in range(3):
            producer.send(topic, value=b"while ZooKeeper is away", partition=p).get(timeout=10)
        producer.close()
        time.sleep(2.0)
    finally:
        zookeeper.resume()
    c.wait_for_brokers_registered([1, 2, 3])
    _create(c, "zk-after-zk-pause", 2, 3)  # the cluster works again
