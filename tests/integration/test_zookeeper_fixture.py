"""The ZooKeeper fixture itself: a real server from Debian's package, stopped by PID."""

from __future__ import annotations

import pytest

from tests.integration.cluster import ZooKeeperServer, four_letter

pytestmark = pytest.mark.integration


def test_zookeeper_serves_keeps_data_across_restart_and_stops(zookeeper, tmp_path):
    from kazoo.client import KazooClient

    assert four_letter("127.0.0.1", zookeeper.port) == b"imok"
    client = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    client.start(timeout=15)
    try:
        path = f"/fixture-{tmp_path.name}"
        client.create(path, b"hello")
        assert client.get(path)[0] == b"hello"
    finally:
        client.stop()
        client.close()

    other = ZooKeeperServer(tmp_path / "zk2")
    other.start()
    pid = other.pid
    other.restart()
    assert other.pid != pid and other.is_running()
    assert four_letter("127.0.0.1", other.port) == b"imok"
    other.stop()
    assert not other.is_running()
