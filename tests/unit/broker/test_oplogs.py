"""broker.oplogs: Kafka's operational log files (layout, routing, rotation by size) and the
request log's JSON."""

from __future__ import annotations

import json
import logging
import re

import pytest

from broker import oplogs
from broker.request_channel import Request
from protocol.messages import ProduceRequest, ProduceResponse

LAYOUT = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] (\w+) (.*) \((\S+)\)")


@pytest.fixture
def logs(tmp_path):
    root = logging.getLogger()
    saved = (root.level,)
    oplogs.setup_operational_logs(str(tmp_path / "logs"),
                                  {"kafka.request.logger": logging.DEBUG},
                                  max_bytes=4000, backups=2)
    yield tmp_path / "logs"
    oplogs.remove_operational_logs()
    root.setLevel(saved[0])


def test_each_logger_writes_its_file_in_kafka_layout(logs, caplog):
    caplog.set_level(logging.INFO)
    logging.getLogger("kafka.controller").log(oplogs.TRACE, "elected %d", 1)
    logging.getLogger("state.change.logger").info("[Controller id=1 epoch=2] changed")
    logging.getLogger("kafka.log.LogCleaner").info("cleaned t-0")
    logging.getLogger("kafka.authorizer.logger").info("Principal = User:x is Denied")
    logging.getLogger("storage.cleaner").info("ours")
    for handler in logging.getLogger("kafka.controller").handlers:
        handler.flush()
    files = {p.name: p.read_text() for p in logs.iterdir()}
    assert set(files) == {"controller.log", "state-change.log", "log-cleaner.log",
                          "kafka-authorizer.log"}
    m = LAYOUT.fullmatch(files["controller.log"].strip())
    assert m and m.groups() == ("TRACE", "elected 1", "kafka.controller")
    assert "cleaned t-0 (kafka.log.LogCleaner)" in files["log-cleaner.log"]
    assert "ours (storage.cleaner)" in files["log-cleaner.log"]
    # Kafka's loggers do not reach the server log (additivity=false); ours still do
    seen = {r.name for r in caplog.records}
    assert "storage.cleaner" in seen and "kafka.log.LogCleaner" not in seen


def test_rotation_by_size(logs):
    log = logging.getLogger("state.change.logger")
    for i in range(200):
        log.info("line %d %s", i, "x" * 40)
    names = sorted(p.name for p in logs.iterdir())
    assert names == ["state-change.log", "state-change.log.1", "state-change.log.2"]
    assert all(p.stat().st_size <= 4000 for p in logs.iterdir())


def test_request_log_line_is_kafka_json(logs):
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=memoryview(b"z" * 80))])])
    resp = ProduceResponse(responses=[])
    r = Request("127.0.0.1:9092-127.0.0.1:5000-0", 0, 0, 0, 9, 42,
                memoryview(bytearray(b"\x00\x00\x00\x09\x00\x00\x00\x2a\x00\x03abc\x00")),
                "PLAINTEXT", None)
    r.body, r.response_msg = req, resp
    line = json.loads(oplogs.request_json(r, (1_000, 2_000_000, 0, 5_000, 7_000, 2_013_000)))
    assert line["requestHeader"] == {"requestApiKey": 0, "requestApiVersion": 9,
                                     "correlationId": 42, "clientId": "abc",
                                     "requestApiKeyName": "PRODUCE"}
    part = line["request"]["topicData"][0]["partitionData"][0]
    assert part == {"index": 0, "recordsSizeInBytes": 80}
    assert line["request"]["acks"] == -1 and line["response"] == {"responses": [],
                                                                  "throttleTimeMs": 0}
    assert line["totalTimeMs"] == 2.013 and line["localTimeMs"] == 2.0
    assert line["connection"] == "127.0.0.1:9092-127.0.0.1:5000-0"
    assert line["principal"] == "User:ANONYMOUS"


def test_parse_level():
    assert oplogs.parse_level("warn") == logging.WARNING
    assert oplogs.parse_level("TRACE") == oplogs.TRACE
    with pytest.raises(ValueError):
        oplogs.parse_level("LOUD")
