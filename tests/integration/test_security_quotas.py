"""Client quotas (issue 15): a producer quota of 1 MB/s holds a flat-out producer within
±20% over 10 s and the client sees throttle times (KIP-219), set with ``josef configs
--entity-type clients``; quota precedence, DescribeClientQuotas/AlterClientQuotas, the
controller mutation quota (THROTTLING_QUOTA_EXCEEDED), and connection limits (KIP-612).
"""

from __future__ import annotations

import json
import socket
import time
import uuid

import pytest

from controller.metadata_store import read_znodes
from protocol.errors import ErrorCode
from tests.integration.harness import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def josef(broker, *args):
    import contextlib
    import io

    from broker.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--bootstrap-server", broker.bootstrap])
    assert code == 0, err.getvalue()
    return out.getvalue()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("quotas"), {
        "max.connections.per.ip.overrides": "127.0.0.2:1",
        "listener.name.plaintext.max.connections": "200"})
    b.start()
    yield b
    b.stop()


def test_producer_quota_holds_a_flat_out_producer(broker):
    from confluent_kafka import Producer

    topic = f"q-{uuid.uuid4().hex[:6]}"
    josef(broker, "topics", "--create", "--topic", topic)
    out = josef(broker, "configs", "--alter", "--entity-type", "clients", "--entity-name",
                "flat-out", "--add-config", "producer_byte_rate=1048576")
    assert out.strip() == "Completed updating config for client flat-out."
    out = josef(broker, "configs", "--describe", "--entity-type", "clients", "--entity-name",
                "flat-out")
    assert out.strip() == "Quota configs for client-id 'flat-out' are producer_byte_rate=1048576.0"
    throttles: list[float] = []
    acked: list[tuple[float, int]] = []

    def stats(text: str) -> None:
        for b in json.loads(text).get("brokers", {}).values():
            if b.get("throttle", {}).get("max", 0) > 0:
                throttles.append(b["throttle"]["max"])

    p = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "flat-out",
                  "linger.ms": 5, "batch.size": 32768, "statistics.interval.ms": 500,
                  "stats_cb": stats, "acks": 1, "queue.buffering.max.kbytes": 256})
    value = b"x" * 10_000
    start = time.monotonic()

    def done(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    while time.monotonic() - start < 11:
        try:
            p.produce(topic, value, on_delivery=done)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.purge(in_queue=True, in_flight=False)
    p.flush(15)
    first = acked[0][0]
    in_window = sum(n for t, n in acked if t - first <= 10.0)
    rate = in_window / 10.0
    assert 0.8 * 1048576 <= rate <= 1.2 * 1048576, rate
    assert throttles, "the client saw no throttle time"


def test_quota_precedence_and_apis(broker):
    from client.connection import KafkaClient

    josef(broker, "configs", "--alter", "--entity-type", "users", "--entity-default",
          "--add-config", "consumer_byte_rate=2000")
    josef(broker, "configs", "--alter", "--user", "alice", "--client", "app",
          "--add-config", "request_percentage=50,producer_byte_rate=3000")
    out = josef(broker, "configs", "--describe", "--entity-type", "users")
    assert "Quota configs for the default user-principal are consumer_byte_rate=2000.0" in out
    out = josef(broker, "configs", "--describe", "--entity-type", "users", "--entity-type",
                "clients")  # strict, as kafka-configs: only user+client entities now
    assert ("Quota configs for user-principal 'alice', client-id 'app' are "
            "producer_byte_rate=3000.0, request_percentage=50.0") in out
    with KafkaClient(broker.bootstrap) as c:
        r = c.request(48, {"components": [{"entity_type": "user", "match_type": 0,
                                           "match": "alice"}], "strict": False})
        assert [[(e.entity_type, e.entity_name) for e in x.entity] for x in r.entries] == \
            [[("user", "alice"), ("client-id", "app")]]
        r = c.request(49, {"entries": [
            {"entity": [{"entity_type": "user", "entity_name": "x"}],
             "ops": [{"key": "producer_byte_rate", "value": 1.5, "remove": False}]},
            {"entity": [{"entity_type": "ip", "entity_name": "not-an-ip"}],
             "ops": [{"key": "connection_creation_rate", "value": 5, "remove": False}]},
            {"entity": [{"entity_type": "user", "entity_name": "y"}],
             "ops": [{"key": "bogus", "value": 1, "remove": False}]}],
            "validate_only": False})
        assert [e.error_code for e in r.entries] == [ErrorCode.INVALID_REQUEST] * 3
    store = read_znodes(str(broker.log_dir))
    assert json.loads(store["/config/users/alice/clients/app"]["data"]) == {
        "version": 1, "config": {"request_percentage": "50.0", "producer_byte_rate": "3000"}}
    assert json.loads(store["/config/users/<default>"]["data"])["config"] == {
        "consumer_byte_rate": "2000"}
    josef(broker, "configs", "--alter", "--entity-type", "users", "--entity-default",
          "--delete-config", "consumer_byte_rate")


def test_controller_mutation_quota(broker):
    from client.connection import KafkaClient

    josef(broker, "configs", "--alter", "--entity-type", "clients", "--entity-name",
          "mutator", "--add-config", "controller_mutation_rate=1")
    with KafkaClient(broker.bootstrap, client_id="mutator") as c:
        topics = [{"name": f"m-{uuid.uuid4().hex[:6]}-{i}", "num_partitions": 6,
                   "replication_factor": 1, "assignments": [], "configs": []}
                  for i in range(3)]
        r = c.request(19, {"topics": topics, "timeout_ms": 10000, "validate_only": False})
        codes = [t.error_code for t in r.topics]
        assert codes.count(ErrorCode.NONE) >= 1
        assert ErrorCode.THROTTLING_QUOTA_EXCEEDED in codes
        assert r.throttle_time_ms > 0


def test_connection_limits(broker):
    # max.connections.per.ip.overrides: 127.0.0.2 may hold one connection
    first = socket.create_connection((broker.host, broker.port), source_address=("127.0.0.2", 0))
    second = socket.create_connection((broker.host, broker.port), source_address=("127.0.0.2", 0))
    try:
        second.settimeout(10)
        assert second.recv(1) == b""  # closed by the broker
        first.settimeout(0.5)
        with pytest.raises(TimeoutError):
            first.recv(1)  # the first one stays open
    finally:
        first.close()
        second.close()
