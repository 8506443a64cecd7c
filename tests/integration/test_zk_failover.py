"""ZooKeeper mode, faults and leadership moves: controller failover (kill -9) with four
clients producing through it, a paused controller fenced by the controller epoch, broker
epochs (KIP-380), startup refusals, malformed znodes, ZooKeeper paused, topic deletion with a
broker down; controlled shutdown of a broker leading a third of 300 partitions, auto leader
rebalance, preferred elections (``josef leader-election``, the Java AdminClient),
reassignment [1,2] -> [2,3] (``josef reassign-partitions``, KIP-455) and through
``/admin/reassign_partitions``, the data following the replicas.

One ZooKeeper and one 3-broker cluster for the module; every test leaves the three brokers
running. Sessions time out after 6 s (``zookeeper.session.timeout.ms`` of the fixture).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time

import pytest

from client.connection import KafkaClient
from protocol.messages import LeaderAndIsrRequest
from storage.checkpoints import write_meta_properties
from tests.integration.cluster import Cluster
from tests.integration.harness import (
    REPO_ROOT,
    BrokerProcess,
    BrokerStartError,
    run_java_client,
)


@pytest.fixture(scope="module")
def zk_cluster(zookeeper, tmp_path_factory):
    """The module's cluster checks the leader balance every second and moves any leadership
    back to a preferred replica that is in the ISR (auto rebalance, no tolerated imbalance)."""
    c = Cluster(tmp_path_factory.mktemp("zk_failover"), zookeeper, 3,
                props={"leader.imbalance.check.interval.seconds": "1",
                       "leader.imbalance.per.broker.percentage": "0"},
                broker_props={1: {"broker.rack": "rack-a"}, 2: {"broker.rack": "rack-b"},
                              3: {"broker.rack": "rack-c"}})
    try:
        c.start()
        yield c
    finally:
        c.stop(kill=True)


pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
    # the Python clients leave the sockets of refused connections (to a killed broker) to the
    # garbage collector
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"),
]

LEADER_AND_ISR, CREATE_TOPICS = 4, 19
STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH = 11, 77


def _create(c: Cluster, topic: str, partitions: int = -1, rf: int = -1,
            assignment: dict[int, list[int]] | None = None) -> dict[int, int]:
    with KafkaClient(c.broker(c.controller_id()).bootstrap) as k:
        resp = k.request(CREATE_TOPICS, {"topics": [{
            "name": topic, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [{"partition_index": p, "broker_ids": b}
                            for p, b in (assignment or {}).items()],
            "configs": []}], "timeout_ms": 60000}, version=5)
    assert resp.topics[0].error_code == 0, resp
    return c.wait_metadata_converged([topic], timeout=60)[topic]


def _states(c: Cluster, topic: str, partitions: int) -> dict[int, tuple[dict, int]]:
    out = {}
    for p in range(partitions):
        raw, stat = c.zk_get(f"/brokers/topics/{topic}/partitions/{p}/state")
        out[p] = (json.loads(raw), stat.mzxid)
    return out


def _broker_epoch(c: Cluster, broker_id: int) -> int:
    return c.zk_get(f"/brokers/ids/{broker_id}")[1].czxid


def test_metadata_lists_racks_and_the_controller_everywhere(zk_cluster):
    c = zk_cluster
    for i in c.ids:
        md = c.metadata(i, [])
        assert {b.node_id: b.rack for b in md.brokers} == {1: "rack-a", 2: "rack-b",
                                                         3: "rack-c"}
        assert md.controller_id == c.controller_id()
        assert c.zk_json(f"/brokers/ids/{i}")["rack"] == {1: "rack-a", 2: "rack-b",
                                                          3: "rack-c"}[i]


def test_generated_broker_id_comes_from_the_sequence_znode(zk_cluster, tmp_path):
    c = zk_cluster
    props = dict(c.broker(1).props)
    props["broker.id"] = "-1"
    props.pop("broker.rack", None)
    b = BrokerProcess(tmp_path / "generated", props, broker_id=-1, startup_timeout=30)
    try:
        b.start()
        seq = c.zk_get("/brokers/seqid")[1].version
        generated = 1000 + seq  # reserved.broker.max.id + the sequence znode's version
        c.wait_for_brokers_registered([1, 2, 3, generated])
        from storage.checkpoints import read_meta_properties

        assert read_meta_properties(str(b.log_dir))["broker.id"] == str(generated)
    finally:
        b.stop()
    c.wait_until("the extra broker deregistered",
                 lambda: c.registered_brokers() == [1, 2, 3])


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


def _confluent_produce(bootstrap, topic, n, delay, acked, errors):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "message.timeout.ms": 60000, "request.timeout.ms": 8000})

    def done(err, msg):
        (errors if err else acked).append(str(err) if err else msg.value())
    for i in range(n):
        p.produce(topic, value=b"confluent-%d" % i, on_delivery=done)
        p.poll(0)
        time.sleep(delay)
    p.flush(90)


def _kafka_python_produce(bootstrap, topic, n, delay, acked, errors):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                      request_timeout_ms=8000, retries=2**31 - 1)
    futures = []
    for i in range(n):
        futures.append((b"kafka-python-%d" % i, p.send(topic, value=b"kafka-python-%d" % i)))
        time.sleep(delay)
    for value, f in futures:
        try:
            f.get(timeout=90)
            acked.append(value)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(repr(e))
    p.close(timeout=10)


def _aiokafka_produce(bootstrap, topic, n, delay, acked, errors):
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             request_timeout_ms=8000)
        await p.start()
        try:
            futs = []
            for i in range(n):
                futs.append((b"aiokafka-%d" % i, await p.send(topic, value=b"aiokafka-%d" % i)))
                await asyncio.sleep(delay)
            for value, f in futs:
                try:
                    await asyncio.wait_for(f, 90)
                    acked.append(value)
                except Exception as e:  # noqa: BLE001 - reported by the test
                    errors.append(repr(e))
        finally:
            await p.stop()
    asyncio.run(main())


def test_kill_controller_fails_over_and_clients_keep_going(zk_cluster, java_client):
    c = zk_cluster
    topic = "zk-failover"
    _create(c, topic, 3, 3)
    old, epoch = c.controller_id(), c.controller_epoch()
    led = {p for p, (st, _) in _states(c, topic, 3).items() if st["leader"] == old}
    assert led  # the spread assignment gives every broker a leadership
    n, delay = 120, 0.02
    results: dict[str, tuple[list, list]] = {}
    threads = []
    for name, fn in (("confluent", _confluent_produce), ("kafka-python", _kafka_python_produce),
                     ("aiokafka", _aiokafka_produce)):
        results[name] = ([], [])
        t = threading.Thread(target=fn, args=(c.bootstrap, topic, n, delay, *results[name]),
                             daemon=True)
        t.start()
        threads.append(t)
    java = subprocess.Popen(
        ["java", "-cp", java_client, "JosefClient", "produce", "--bootstrap", c.bootstrap,
         "--topic", topic, "--count", str(n), "--delay-ms", str(int(delay * 1000)),
         "--idempotence", "true", "--acks", "all", "--key-prefix", "java-",
         "--timeout-ms", "60000", "--prop", "request.timeout.ms=8000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    killed_at = time.monotonic()
    c.kill(old)
    new = c.wait_for_controller(exclude=[old], timeout=c.session_timeout_ms / 1000 + 5)
    elapsed = time.monotonic() - killed_at
    assert elapsed <= c.session_timeout_ms / 1000 + 2, elapsed
    assert c.controller_epoch() == epoch + 1
    c.wait_for_leaders(topic, 3, exclude=[old])
    for p, (st, _) in _states(c, topic, 3).items():
        assert st["leader"] != old and st["leader"] in st["isr"] and old not in st["isr"]
        if p in led:  # elected from the ISR by the new controller
            assert st["controller_epoch"] == epoch + 1
    for t in threads:
        t.join(timeout=120)
    out, err = java.communicate(timeout=120)
    assert java.returncode == 0, err[-3000:]
    java_acked = [line for line in out.splitlines() if line.startswith("ack ")]
    assert len(java_acked) == n and "fail " not in out
    for name, (acked, errors) in results.items():
        assert not errors, (name, errors[:3])  # retriable errors only: all delivered
        assert len(acked) == n, name
    # every acknowledged record is there exactly once (idempotent producers, acks=all)
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap, consumer_timeout_ms=10000,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    values = []
    for r in consumer:
        values.append(r.value)
        if len(values) == 4 * n:
            break
    consumer.close()
    assert len(values) == 4 * n
    for name, (acked, _) in results.items():
        assert sorted(v for v in values if v.startswith(name.encode() + b"-")) == sorted(acked)
    # the killed broker comes back (new broker epoch); auto rebalance returns its leaderships
    c.start_broker(old)
    c.wait_for_brokers_registered([1, 2, 3])
    assert c.controller_id() == new
    c.wait_until("preferred leaders restored", lambda: all(
        st["leader"] == c.zk_json(f"/brokers/topics/{topic}")["partitions"][str(p)][0]
        for p, (st, _) in _states(c, topic, 3).items()), timeout=30)
    c.wait_metadata_converged([topic])


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
    # the controller changes meanwhile: the new one resumes the deletion
    old = c.controller_id()
    c.stop_broker(old)
    c.wait_for_controller(exclude=[old, victim])
    c.start_broker(old)
    assert c.zk_get(f"/brokers/topics/{topic}") is not None
    c.start_broker(victim)
    c.wait_until("the deletion finished", lambda: c.zk_get(f"/brokers/topics/{topic}") is None
                 and topic not in c.zk_children("/admin/delete_topics"), timeout=30)
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


def _josef(*args: str, timeout: float = 60.0):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "broker.cli", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _state_docs(c: Cluster, topic: str, n: int) -> dict[int, dict]:
    return {p: c.partition_state(topic, p) for p in range(n)}


def test_controlled_shutdown_moves_every_leadership_then_auto_rebalance(zk_cluster):
    c = zk_cluster
    topic, n = "zk-cs", 300
    leaders = _create(c, topic, n, 3)
    victim = next(b for b in c.ids if b != c.controller_id())
    assert sum(1 for b in leaders.values() if b == victim) == n // 3
    assert c.stop_broker(victim) == 0
    log = c.broker(victim).log_text()
    assert "Controlled shutdown request returned successfully" in log, log[-3000:]
    states = _state_docs(c, topic, n)  # written by the controller before it answered
    assert [p for p, st in states.items() if st["leader"] == victim] == []
    assert [p for p, st in states.items() if victim in st["isr"]] == []
    # back again: once in the ISRs, the auto rebalance returns its preferred leaderships
    c.start_broker(victim)
    c.wait_for_brokers_registered([1, 2, 3])
    c.wait_until("preferred leaders restored by the auto rebalance", lambda: sorted(
        p for p, st in _state_docs(c, topic, n).items() if st["leader"] == victim) == sorted(
        p for p, b in leaders.items() if b == victim), timeout=60, interval=0.5)


def test_preferred_election_with_the_java_admin_client(zk_cluster, java_client):
    c = zk_cluster
    topic = "zk-elect-java"
    _create(c, topic, 3, 3)
    r = run_java_client(java_client, "admin", "--bootstrap", c.bootstrap, "--op",
                        "elect-preferred", "--topic", topic)
    assert r.returncode == 0, r.stderr
    assert sorted(line for line in r.lines if line.startswith("elected")) == [
        f"elected {p} ElectionNotNeededException" for p in range(3)]


def test_reassignment_1_2_to_2_3_moves_the_data(zk_cluster, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    c = zk_cluster
    topic = "zk-move"
    _create(c, topic, assignment={0: [1, 2]})
    producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all")
    for i in range(50):
        producer.send(topic, value=b"m%d" % i)
    producer.flush(timeout=30)
    producer.close()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]}]}))
    out = _josef("reassign-partitions", "--bootstrap-server", c.bootstrap, "--execute",
                 "--reassignment-json-file", str(plan))
    assert out.returncode == 0, out.stderr
    assert "Current partition replica assignment" in out.stdout
    assert '{"version":1,"partitions":[{"topic":"zk-move","partition":0,"replicas":[1,2],' \
           '"log_dirs":["any","any"]}]}' in out.stdout
    assert f"Successfully started partition reassignment for {topic}-0" in out.stdout

    verify: list[str] = []

    def verified():
        v = _josef("reassign-partitions", "--bootstrap-server", c.bootstrap, "--verify",
                   "--reassignment-json-file", str(plan))
        verify[:] = v.stdout.splitlines()
        return f"Reassignment of partition {topic}-0 is completed." in v.stdout
    c.wait_until("the reassignment completed", verified, timeout=60, interval=0.5)
    # each status line is followed by the bytes copied: all of the leader's, at 100%
    bar = verify[verify.index(f"Reassignment of partition {topic}-0 is completed.") + 1]
    assert re.fullmatch(rf"  {topic}-0: 100\.0%\|#{{20}}\| (\d+B|[\d.]+[kM]B)/\1", bar), bar
    assignment = c.zk_json(f"/brokers/topics/{topic}")
    assert assignment["partitions"] == {"0": [2, 3]}
    assert assignment["adding_replicas"] == {} and assignment["removing_replicas"] == {}
    st = c.partition_state(topic, 0)
    assert st["leader"] in (2, 3) and sorted(st["isr"]) == [2, 3]
    out = _josef("reassign-partitions", "--bootstrap-server", c.bootstrap, "--list")
    assert out.stdout.strip() == "No partition reassignments found."
    c.wait_until("broker 1 deleted its replica", lambda: not list(
        c.broker(1).log_dir.glob(f"{topic}-0")))
    c.wait_metadata_converged([topic])
    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap, consumer_timeout_ms=10000,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    got = []
    for r in consumer:
        got.append(r.value)
        if len(got) == 50:
            break
    consumer.close()
    assert got == [b"m%d" % i for i in range(50)]


def test_reassignment_through_the_admin_znode_and_generate(zk_cluster, tmp_path):
    c = zk_cluster
    topic = "zk-move-znode"
    _create(c, topic, assignment={0: [3, 1]})
    c.zk().create("/admin/reassign_partitions", json.dumps(
        {"version": 1, "partitions": [{"topic": topic, "partition": 0,
                                       "replicas": [1, 2]}]}).encode())
    c.wait_until("the znode reassignment completed", lambda: c.zk_get(
        "/admin/reassign_partitions") is None and c.zk_json(
        f"/brokers/topics/{topic}")["partitions"] == {"0": [1, 2]}, timeout=60)
    c.wait_metadata_converged([topic])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    out = _josef("reassign-partitions", "--bootstrap-server", c.bootstrap, "--generate",
                 "--topics-to-move-json-file", str(topics), "--broker-list", "2,3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1])["partitions"][0]["replicas"] == [1, 2]
    assert lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])["partitions"][0]
    assert sorted(proposed["replicas"]) == [2, 3] and proposed["log_dirs"] == ["any", "any"]
    assert re.fullmatch(r"\{.*\}", lines[4])
