"""The harness itself, against a stand-in broker (tests/integration/fake_broker.py)."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from tests.integration.harness import (
    BrokerProcess,
    BrokerStartError,
    api_versions_probe,
    java_value,
)

FAKE = [sys.executable, str(Path(__file__).with_name("fake_broker.py"))]


def test_start_probe_stop_restart_kill(tmp_path):
    b = BrokerProcess(tmp_path / "b", command=FAKE)
    b.start()
    try:
        assert api_versions_probe(b.host, b.port) == [(18, 0, 3)]
        props = b.properties_path.read_text()
        assert f"listeners=PLAINTEXT://127.0.0.1:{b.port}" in props
        assert f"log.dirs={b.log_dir}" in props
        port, pid = b.port, b.pid
        assert b.stop() == 0 and "stopped cleanly" in b.log_text()
        b.start()
        assert b.port == port and b.pid != pid
        assert b.kill() == -signal.SIGKILL
        with pytest.raises(OSError):
            socket.create_connection((b.host, port), timeout=1).close()
        b.restart()
        assert b.is_running() and b.starts == 3
    finally:
        b.stop()
    assert not b.is_running()


def test_startup_failure_shows_log(tmp_path):
    b = BrokerProcess(tmp_path / "b", command=[sys.executable, "-c",
                                               "import sys; print('boom: bad config'); sys.exit(2)"])
    with pytest.raises(BrokerStartError, match="(?s)exited with code 2.*boom: bad config"):
        b.start()
    assert not b.is_running()


def test_not_ready_within_timeout_is_killed(tmp_path):
    b = BrokerProcess(tmp_path / "b", command=[sys.executable, "-c", "import time; time.sleep(60)"],
                      startup_timeout=1.0)
    with pytest.raises(BrokerStartError, match="not ready after"):
        b.start()
    assert not b.is_running()
    with pytest.raises(ProcessLookupError):
        os.kill(b.pid, 0)


def test_bind_failure_retries_with_a_new_port(tmp_path):
    marker = tmp_path / "failed-once"
    b = BrokerProcess(tmp_path / "b", command=FAKE, extra_args=["--fail-bind-once", str(marker)])
    b.start()
    try:
        assert marker.exists() and b.starts == 2
        api_versions_probe(b.host, b.port)
    finally:
        b.stop()


def test_port_from_log(tmp_path):
    b = BrokerProcess(tmp_path / "b", command=FAKE, port_from_log=True)
    b.start()
    try:
        assert b.port and b.port > 0
        api_versions_probe(b.host, b.port)
        port = b.port
        b.restart(hard=True)
        assert b.port == port
        assert f"listeners=PLAINTEXT://127.0.0.1:{port}" in b.properties_path.read_text()
        api_versions_probe(b.host, b.port)
    finally:
        b.stop()


def test_port_from_log_without_the_line_fails_clearly(tmp_path):
    b = BrokerProcess(tmp_path / "b", port_from_log=True, startup_timeout=2.0,
                      command=[sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(BrokerStartError, match="Awaiting socket connections"):
        b.start()
    assert not b.is_running()


def test_java_value_pattern():
    assert java_value(3, 4) == bytes([3, 4, 5, 6])
    assert java_value(255, 2) == bytes([255, 0])


def test_java_client_compiles_and_checks_usage(java_client):
    from tests.integration.harness import JAVA_BUILD, run_java_client

    assert (JAVA_BUILD / "JosefClient.class").exists()
    assert "kafka-clients.jar" in java_client
    res = run_java_client(java_client, "produce", "--topic", "t", timeout=60)
    assert res.returncode == 64 and "missing --bootstrap" in res.stderr
