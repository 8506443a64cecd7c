"""The Prometheus endpoint and the operational logs of a live broker, driven by confluent-kafka.

After producing and consuming, one scrape of ``/metrics`` shows the topic's BrokerTopicMetrics
counts, request-time summaries for Produce and Fetch, Log gauges, ReplicaManager / controller /
purgatory / group gauges, the process families and the lag of a group (0 once it committed
everything, then the number of records produced after that). With
``--logger kafka.request.logger=DEBUG`` every request is a ``Completed request:`` JSON line in
``kafka-request.log``; the controller's lines go to ``controller.log``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.harness import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

METRICS_RE = re.compile(rb"Prometheus metrics on http://127\.0\.0\.1:(\d+)/metrics")
TOPIC = "metrics-orders"
N = 50


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    d = tmp_path_factory.mktemp("metrics_broker")
    b = BrokerProcess(d, {"prometheus.listener": "http://127.0.0.1:0"},
                      extra_args=["--logger", "kafka.request.logger=DEBUG",
                                  "--log-dir", str(d / "oplogs")])
    b.start()
    m = None
    deadline = time.monotonic() + 20
    while m is None and time.monotonic() < deadline:
        m = METRICS_RE.search(b.out_path.read_bytes())
        time.sleep(0.05)
    assert m, b.log_tail()
    b.metrics_url = f"http://127.0.0.1:{int(m.group(1))}/metrics"
    b.oplog_dir = d / "oplogs"
    try:
        yield b
    finally:
        b.stop()


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def produce(bootstrap: str, n: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(TOPIC, key=b"k%d" % i, value=b"value-%04d" % i)
    assert p.flush(30) == 0


def consume_all(bootstrap: str, group: str, n: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([TOPIC])
    got = 0
    deadline = time.monotonic() + 60
    try:
        while got < n and time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is not None and not msg.error():
                got += 1
        assert got == n
        c.commit(asynchronous=False)
    finally:
        c.close()


def test_scrape_after_produce_and_consume(mbroker):
    admin_topic = [("topic", TOPIC)]
    produce(mbroker.bootstrap, N)
    consume_all(mbroker.bootstrap, "metrics-group", N)
    m = scrape(mbroker.metrics_url)

    def get(name, **labels):
        return m.get((name, tuple(sorted(labels.items()))))

    assert get("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == N
    assert get("kafka_server_brokertopicmetrics_messagesin_total") >= N
    assert get("kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) > N * 10
    assert get("kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) >= \
        get("kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC)
    assert get("kafka_server_brokertopicmetrics_totalproducerequests_total", topic=TOPIC) >= 1
    assert get("kafka_server_brokertopicmetrics_failedproducerequests_total", topic=TOPIC) == 0
    assert get("kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=TOPIC) >= 1
    for request in ("Produce", "Fetch", "FetchConsumer"):
        assert get("kafka_network_requestmetrics_totaltimems_count", request=request) >= 1
        for q in ("0.50", "0.99", "0.999"):
            assert get("kafka_network_requestmetrics_totaltimems", request=request,
                       quantile=q) >= 0
        for part in ("requestqueuetimems", "localtimems", "remotetimems",
                     "responsequeuetimems", "responsesendtimems"):
            assert get(f"kafka_network_requestmetrics_{part}_count", request=request) >= 1
    produce_versions = [k for k in m if k[0] == "kafka_network_requestmetrics_requests_total"
                        and ("request", "Produce") in k[1]]
    assert produce_versions and all(dict(k[1])["version"].isdigit() for k in produce_versions)
    assert get("kafka_log_log_logendoffset", topic=TOPIC, partition="0") == N
    assert get("kafka_log_log_logstartoffset", topic=TOPIC, partition="0") == 0
    assert get("kafka_log_log_size", topic=TOPIC, partition="0") > N * 10
    assert get("kafka_server_replicamanager_partitioncount") >= 1
    assert get("kafka_server_replicamanager_leadercount") >= 1
    assert get("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert get("kafka_server_replicamanager_isrshrinks_total") == 0
    assert get("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert get("kafka_controller_kafkacontroller_globaltopiccount") >= 1
    assert get("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert get("kafka_server_delayedoperationpurgatory_purgatorysize",
               delayedOperation="Produce") is not None
    assert get("kafka_server_delayedoperationpurgatory_numdelayedoperations",
               delayedOperation="Fetch") is not None
    assert get("kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1
    assert get("kafka_network_requestchannel_requestqueuesize") is not None
    idle = get("kafka_network_socketserver_networkprocessoravgidlepercent")
    assert 0.0 <= idle <= 1.0
    assert get("josef_event_loop_lag_seconds") >= 0
    assert get("process_resident_memory_bytes") > 10_000_000
    assert get("process_open_fds") > 0
    assert get("process_cpu_seconds_total") > 0
    group = [("consumergroup", "metrics-group"), ("partition", "0"), *admin_topic]
    assert m[("kafka_consumergroup_lag", tuple(sorted(group)))] == 0
    assert m[("kafka_consumergroup_current_offset", tuple(sorted(group)))] == N

    produce(mbroker.bootstrap, 7, start=N)  # the group falls 7 behind
    m = scrape(mbroker.metrics_url)
    assert m[("kafka_consumergroup_lag", tuple(sorted(group)))] == 7


def test_request_and_controller_logs(mbroker):
    produce(mbroker.bootstrap, 1, start=1000)
    log = mbroker.oplog_dir / "kafka-request.log"
    deadline = time.monotonic() + 10
    lines: list[dict] = []
    while time.monotonic() < deadline:
        lines = [json.loads(line.split("Completed request:", 1)[1].rsplit(" (", 1)[0])
                 for line in log.read_text().splitlines() if "Completed request:" in line]
        if any(x["requestHeader"]["requestApiKeyName"] == "PRODUCE" for x in lines):
            break
        time.sleep(0.1)
    produce_lines = [x for x in lines if x["requestHeader"]["requestApiKeyName"] == "PRODUCE"]
    assert produce_lines, log.read_text()[-2000:]
    x = produce_lines[-1]
    assert x["request"]["topicData"][0]["name"] == TOPIC
    assert x["totalTimeMs"] >= x["localTimeMs"] >= 0 and x["listener"] == "PLAINTEXT"
    assert x["requestHeader"]["clientId"] == "rdkafka"
    assert "DEBUG Completed request:" in log.read_text()
    assert "(controller.embedded)" in (mbroker.oplog_dir / "controller.log").read_text()
    assert "Completed request" not in mbroker.log_text()  # not in the server log
