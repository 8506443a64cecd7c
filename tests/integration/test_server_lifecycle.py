"""The broker process: clean shutdown on SIGTERM, fatal startup errors, --daemon, restarts
(clean and SIGKILL) keeping topics and topic ids, broker.id generation, log dir locking."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protocol import api
from tests.integration.harness import (
    BOUND_PORT_RE,
    REPO_ROOT,
    BrokerProcess,
    api_versions_probe,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _write_props(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _run_broker(props_path: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run ``python -m broker`` expecting it to exit by itself (bounded)."""
    return subprocess.run([sys.executable, "-m", "broker", str(props_path), *args],
                          cwd=props_path.parent, env=_env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _base_props(tmp_path: Path) -> dict[str, str]:
    return {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path / "kafka-logs")}


def _metadata(broker: BrokerProcess, topics):
    from tests.integration.test_metadata_topics import metadata  # raw Metadata helper
    return metadata(broker, 12, topics)


def _create_and_wait(broker: BrokerProcess, topic: str, partitions: int = 1):
    from tests.integration.test_metadata_topics import call, wait_leader
    req = api.API_KEYS[19].request_cls
    r = call(broker, 19, 7, timeout_ms=10000, topics=[
        req.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1)])
    assert r.topics[0].error_code == 0, r
    return wait_leader(broker, topic, partitions)


def _topic_ids(broker: BrokerProcess) -> dict[str, object]:
    return {t.name: t.topic_id for t in _metadata(broker, None).topics}


def _meta_properties(log_dir: Path) -> dict[str, str]:
    out = {}
    for line in (log_dir / "meta.properties").read_text().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


# ----- clean shutdown and restarts ------------------------------------------------------------

def test_sigterm_leaves_clean_shutdown_marker_and_checkpoints(broker_factory):
    from kafka import KafkaProducer

    b = broker_factory()
    _create_and_wait(b, "life-1", 2)
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
    try:
        for i in range(20):
            producer.send("life-1", b"v%d" % i, partition=i % 2)
        producer.flush(timeout=20)
    finally:
        producer.close()
    assert b.stop() == 0
    log_dir = b.log_dir
    assert (log_dir / ".kafka_cleanshutdown").exists()
    recovery = (log_dir / "recovery-point-offset-checkpoint").read_text().splitlines()
    assert recovery[0] == "0" and int(recovery[1]) == 2
    assert sorted(recovery[2:]) == ["life-1 0 10", "life-1 1 10"]
    assert "life-1 0 0" in (log_dir / "log-start-offset-checkpoint").read_text()
    meta = _meta_properties(log_dir)
    assert meta["version"] == "0" and meta["broker.id"] == "0" and len(meta["cluster.id"]) == 22
    assert "shut down completed" in b.log_text()


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_restart_keeps_topics_and_topic_ids(broker_factory, hard):
    b = broker_factory()
    _create_and_wait(b, "keep-a", 3)
    _create_and_wait(b, "keep-b", 1)
    before = _topic_ids(b)
    cluster_id = _metadata(b, []).cluster_id
    b.restart(hard=hard)
    assert not (b.log_dir / ".kafka_cleanshutdown").exists()  # removed at startup
    after = _metadata(b, None)
    assert {t.name: t.topic_id for t in after.topics} == before
    assert after.cluster_id == cluster_id
    assert {t.name: len(t.partitions) for t in after.topics} == {"keep-a": 3, "keep-b": 1}
    assert all(p.leader_id == 0 for t in after.topics for p in t.partitions)


def test_generated_broker_id_is_persisted(broker_factory):
    b = broker_factory({"broker.id": "-1"})
    assert _metadata(b, []).brokers[0].node_id == 1001  # reserved.broker.max.id + 1
    assert _meta_properties(b.log_dir)["broker.id"] == "1001"
    b.restart()
    assert _metadata(b, []).controller_id == 1001


# ----- fatal startup errors -------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [("num.partitions", "many"),
                                       ("listeners", "PLAINTEXT://127.0.0.1"),
                                       ("log.segment.bytes", "-5")])
def test_bad_config_value_exits_nonzero_naming_the_key(tmp_path, key, value):
    props = _base_props(tmp_path) | {key: value}
    out = _run_broker(_write_props(tmp_path / "server.properties", props))
    assert out.returncode != 0
    assert key in out.stderr + out.stdout
    assert not (tmp_path / "kafka-logs" / "meta.properties").exists()


def test_unknown_key_is_logged_and_ignored(broker_factory):
    b = broker_factory({"no.such.key": "1"})
    assert "no.such.key" in b.log_text()
    api_versions_probe(b.host, b.port)


def test_zookeeper_unreachable_at_startup_fails_clearly(tmp_path):
    props = _base_props(tmp_path) | {"zookeeper.connect": "127.0.0.1:1",
                                     "zookeeper.connection.timeout.ms": "1500"}
    started = time.monotonic()
    out = _run_broker(_write_props(tmp_path / "server.properties", props))
    assert out.returncode == 1
    assert "Timed out waiting for connection to ZooKeeper (127.0.0.1:1)" in out.stderr
    assert "zookeeper.connection.timeout.ms=1500" in out.stderr
    assert time.monotonic() - started >= 1.5
    assert "Traceback" not in out.stderr


def test_second_broker_on_same_log_dir_fails(broker_factory, tmp_path):
    b = broker_factory()
    props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
             "log.dirs": str(b.log_dir)}
    out = _run_broker(_write_props(tmp_path / "second.properties", props))
    assert out.returncode == 1
    assert "Failed to acquire lock on file .lock" in out.stderr
    api_versions_probe(b.host, b.port)  # the first broker is unharmed


def test_inconsistent_cluster_id_stops_startup(broker_factory):
    b = broker_factory()
    b.stop()
    meta = b.log_dir / "meta.properties"
    meta.write_text(meta.read_text().replace("cluster.id=", "cluster.id=X"))
    with pytest.raises(Exception, match="exited with code 1"):
        b.start()
    assert "doesn't match stored clusterId" in b.log_text()


def test_mismatched_broker_id_stops_startup(broker_factory):
    b = broker_factory()
    b.stop()
    b.props["broker.id"] = "7"
    with pytest.raises(Exception, match="exited with code 1"):
        b.start()
    assert "doesn't match stored broker.id 0" in b.log_text()


def test_unwritable_log_dir_fails(tmp_path):
    if os.geteuid() == 0:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        log_dirs = str(blocker / "kafka-logs")  # a path below a regular file
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        log_dirs = str(ro / "kafka-logs")
    props = _base_props(tmp_path) | {"log.dirs": log_dirs}
    out = _run_broker(_write_props(tmp_path / "server.properties", props))
    assert out.returncode == 1
    assert "cannot be created or is not writable" in out.stderr


# ----- --daemon -------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_daemon_writes_pid_file_and_stops_on_sigterm(tmp_path):
    props = _write_props(tmp_path / "server.properties", _base_props(tmp_path))
    pid_file, log_file = tmp_path / "josef.pid", tmp_path / "josef.out"
    out = _run_broker(props, "--daemon", "--pid-file", str(pid_file), "--log-file",
                      str(log_file), timeout=20)
    assert out.returncode == 0, out.stderr
    pid = None
    try:
        deadline = time.monotonic() + 20
        port = None
        while time.monotonic() < deadline and port is None:
            if pid is None and pid_file.exists() and pid_file.read_text().strip():
                pid = int(pid_file.read_text().strip())
            m = BOUND_PORT_RE.search(log_file.read_bytes()) if log_file.exists() else None
            port = int(m.group(1)) if m else None
            time.sleep(0.05)
        assert pid is not None and port is not None, log_file.read_text()
        while True:
            try:
                api_versions_probe("127.0.0.1", port)
                break
            except (OSError, ValueError):
                assert time.monotonic() < deadline
                time.sleep(0.05)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
        pid = None
        assert not pid_file.exists()
        assert (tmp_path / "kafka-logs" / ".kafka_cleanshutdown").exists()
        assert "shut down completed" in log_file.read_text()
    finally:
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
