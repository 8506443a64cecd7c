"""Fixtures for integration tests: live brokers on loopback, kcat, the Java client.

- ``broker``: a fresh broker per test (function scope).
- ``shared_broker``: one broker per test module (module scope); use distinct topic names.
- ``broker_factory``: ``broker_factory(props=None, name=None) -> BrokerProcess`` started with
  extra server.properties entries; every broker it made is stopped at teardown.
- ``kcat``: path of kcat; ``java_client``: classpath for ``run_java_client`` (compiled once
  per session into tests/java/build).
- ``zookeeper`` (module scope): a real ZooKeeper (Debian package) on a free loopback port;
  ``zk_cluster`` (module scope): 3 brokers (ids 1-3) registered in it; ``cluster_factory``:
  ``cluster_factory(n=3, props=None, broker_props=None, zookeeper=None) -> Cluster`` started,
  stopped at teardown (tests/integration/cluster.py documents the helpers).

While ``broker/server.py`` does not exist yet, broker fixtures skip with that reason.
Brokers are always stopped by PID at teardown (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os

import pytest

from tests.integration.cluster import Cluster, ZooKeeperServer, zookeeper_available
from tests.integration.harness import (
    REPO_ROOT,
    BrokerProcess,
    build_java_client,
    require_tool,
)

SERVER_MODULE = REPO_ROOT / "broker" / "server.py"


def _require_server() -> None:
    if not SERVER_MODULE.exists():
        pytest.skip("broker/server.py does not exist yet")


@pytest.fixture
def broker_factory(tmp_path):
    _require_server()
    made: list[BrokerProcess] = []

    def make(props: dict[str, str] | None = None, name: str | None = None) -> BrokerProcess:
        b = BrokerProcess(tmp_path / (name or f"broker{len(made)}"), props)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.stop()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    _require_server()
    b = BrokerProcess(tmp_path_factory.mktemp("shared_broker"))
    try:
        b.start()
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def kcat() -> str:
    return require_tool("kcat")


@pytest.fixture(scope="session")
def java_client() -> str:
    try:
        return build_java_client()
    except FileNotFoundError as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))


# ----- ZooKeeper and clusters (tests/integration/cluster.py) ----------------------------------

def _require_zookeeper() -> None:
    _require_server()
    why = zookeeper_available()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    _require_zookeeper()
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        zk.start()
        yield zk
    finally:
        zk.stop()


@pytest.fixture(scope="module")
def zk_cluster(zookeeper, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("zk_cluster"), zookeeper, 3)
    try:
        c.start()
        yield c
    finally:
        c.stop(kill=True)  # teardown: no need for three controlled shutdowns


@pytest.fixture
def cluster_factory(tmp_path):
    _require_zookeeper()
    made: list[Cluster] = []
    servers: list[ZooKeeperServer] = []

    def make(n: int = 3, props: dict[str, str] | None = None,
             broker_props: dict[int, dict[str, str]] | None = None,
             zookeeper: ZooKeeperServer | None = None, start: bool = True) -> Cluster:
        if zookeeper is None:
            zookeeper = ZooKeeperServer(tmp_path / f"zookeeper{len(servers)}")
            servers.append(zookeeper)
            zookeeper.start()
        c = Cluster(tmp_path / f"cluster{len(made)}", zookeeper, n, props=props,
                    broker_props=broker_props)
        made.append(c)
        return c.start() if start else c

    yield make
    for c in made:
        c.stop(kill=True)
    for zk in servers:
        zk.stop()


@pytest.fixture(scope="module", autouse=True)
def _collect_client_sockets():
    """After each module: collect, silently, the sockets stock clients leave for the garbage
    collector (kafka-python's refused connects to killed brokers), so their ResourceWarnings
    are not raised inside an unrelated later test."""
    yield
    import gc
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
