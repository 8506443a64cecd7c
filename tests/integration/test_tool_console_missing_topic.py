"""``josef console-consumer --topic T`` started before T exists (with and without --group).

Kafka's console consumer lets the broker auto-create the topic (its Metadata requests say
``allow_auto_topic_creation=true``) and then waits for records; on a broker with
``auto.create.topics.enable=false`` it warns "Error while fetching metadata ...
UNKNOWN_TOPIC_OR_PARTITION" and keeps waiting, picking the topic up once someone creates it,
or exits 0 at ``--timeout-ms``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from client.connection import KafkaClient
from tests.integration.conftest import _require_server
from tests.integration.harness import REPO_ROOT, BrokerProcess

pytestmark = pytest.mark.timeout(120)

FAST = ["--consumer-property", "session.timeout.ms=6000",
        "--consumer-property", "heartbeat.interval.ms=300"]
WITH_AND_WITHOUT_GROUP = pytest.mark.parametrize("grouped", [False, True],
                                                 ids=["no-group", "group"])


@pytest.fixture(scope="module")
def noauto_broker(tmp_path_factory):
    """A broker with ``auto.create.topics.enable=false``."""
    _require_server()
    b = BrokerProcess(tmp_path_factory.mktemp("noauto_broker"),
                      {"auto.create.topics.enable": "false"})
    try:
        b.start()
        yield b
    finally:
        b.stop()


def josef(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], input=input,
                          capture_output=True, timeout=60, cwd=REPO_ROOT)


def start_consumer(bootstrap: str, topic: str, *extra: str,
                   grouped: bool = False) -> subprocess.Popen:
    group = ["--group", f"g-{uuid.uuid4().hex[:8]}", *FAST] if grouped else []
    return subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "console-consumer", "--bootstrap-server",
         bootstrap, "--topic", topic, *group, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=5)
    return proc.returncode, out.decode(), err.decode()


def topic_error(bootstrap: str, topic: str) -> int:
    """The topic's Metadata error code, asked without auto-creation (0 = it exists)."""
    with KafkaClient(bootstrap, timeout=10) as client:
        md = client.metadata([topic])
    return next(t.error_code for t in md.topics if t.name == topic)


def wait_until(cond, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def new_topic() -> str:
    return f"missing-{uuid.uuid4().hex[:8]}"


@WITH_AND_WITHOUT_GROUP
def test_consumer_auto_creates_the_topic_then_prints_records(shared_broker, grouped):
    topic = new_topic()
    assert topic_error(shared_broker.bootstrap, topic) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    proc = start_consumer(shared_broker.bootstrap, topic, "--from-beginning",
                          "--max-messages", "3", "--timeout-ms", "45000", grouped=grouped)
    try:
        # The consumer's own Metadata request created it (the broker allows auto-creation).
        wait_until(lambda: topic_error(shared_broker.bootstrap, topic) == 0)
        time.sleep(0.5)
        assert proc.poll() is None, "the consumer must wait for records, not exit"
        res = josef("console-producer", "--bootstrap-server", shared_broker.bootstrap,
                    "--topic", topic, input=b"a\nb\nc\n")
        assert res.returncode == 0, res.stderr
    finally:
        rc, out, err = finish(proc)
    assert rc == 0, err
    assert out.splitlines() == ["a", "b", "c"]
    assert "UNKNOWN_TOPIC_OR_PARTITION" not in err and "Traceback" not in err
    assert "Processed a total of 3 messages" in err


@WITH_AND_WITHOUT_GROUP
def test_without_auto_creation_it_warns_once_and_exits_0_at_the_timeout(noauto_broker,
                                                                        grouped):
    topic = new_topic()
    start = time.monotonic()
    proc = start_consumer(noauto_broker.bootstrap, topic, "--timeout-ms", "2500",
                          grouped=grouped)
    rc, out, err = finish(proc)
    elapsed = time.monotonic() - start
    assert rc == 0, err
    assert elapsed >= 2.5
    assert out == ""
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1, err
    assert f"{topic}=UNKNOWN_TOPIC_OR_PARTITION" in warnings[0]
    assert "error:" not in err and "Traceback" not in err
    assert "Processed a total of 0 messages" in err
    assert topic_error(noauto_broker.bootstrap, topic) == 3  # nothing was created


@WITH_AND_WITHOUT_GROUP
def test_without_auto_creation_it_picks_the_topic_up_once_created(noauto_broker, grouped):
    topic = new_topic()
    proc = start_consumer(noauto_broker.bootstrap, topic, "--from-beginning",
                          "--max-messages", "2", "--timeout-ms", "45000", grouped=grouped)
    try:
        time.sleep(1.5)
        assert proc.poll() is None, "the consumer must keep waiting for the topic"
        assert topic_error(noauto_broker.bootstrap, topic) == 3
        res = josef("topics", "--bootstrap-server", noauto_broker.bootstrap, "--create",
                    "--topic", topic, "--partitions", "2")
        assert res.returncode == 0, res.stderr
        res = josef("console-producer", "--bootstrap-server", noauto_broker.bootstrap,
                    "--topic", topic, input=b"x\ny\n")
        assert res.returncode == 0, res.stderr
    finally:
        rc, out, err = finish(proc)
    assert rc == 0, err
    assert sorted(out.splitlines()) == ["x", "y"]
    assert sum("warning" in line for line in err.splitlines()) == 1, err
    assert "Processed a total of 2 messages" in err
