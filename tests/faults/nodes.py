"""The processes of a fault run: ZooKeeper and the brokers, each in its place in the network.

``BrokerNode`` is the integration tests' ``BrokerProcess`` (server.properties, readiness by
an ApiVersions round trip, SIGTERM/SIGKILL by PID) started under the network's command prefix
(``ip netns exec <ns>``) on its own address and fixed port, its PID recorded in the run's
state file the moment it is spawned. ``ZooKeeperNode`` is the same for the integration tests' ZooKeeper launcher
(``tests/integration/cluster.py``). Both have ``pause()``/``resume()`` (SIGSTOP/SIGCONT).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.faults.net import Network
from tests.faults.state import RunState
from tests.integration.cluster import ZooKeeperServer
from tests.integration.harness import BrokerProcess

BROKER_PORT = 9092
ZK_PORT = 2181


class _Tracked:
    """Records a node's process in the run's state file and with the network when spawned
    (``name``, ``network`` and ``state`` are set by the node classes)."""

    name: str
    network: Network
    state: RunState
    proc: subprocess.Popen | None

    def _spawn(self) -> None:
        super()._spawn()  # type: ignore[misc]
        assert self.proc is not None
        self.state.add_pid(self.proc.pid)
        self.network.node_started(self.name, self.proc.pid)


class BrokerNode(_Tracked, BrokerProcess):
    """Broker ``broker_id`` as node ``name`` of ``network``."""

    def __init__(self, directory: Path, name: str, network: Network, state: RunState,
                 props: Mapping[str, str], broker_id: int, startup_timeout: float = 60.0):
        command = [*network.command_prefix(name), sys.executable, "-m", "broker"]
        super().__init__(directory, props, broker_id=broker_id, command=command,
                         startup_timeout=startup_timeout)
        self.name = name
        self.network = network
        self.state = state
        self.host = network.host(name)
        self.port = network.port(name, BROKER_PORT)
        self.paused = False

    def write_properties(self) -> None:
        listen = self.network.listen_port(self.name, BROKER_PORT)
        self.props.setdefault("listeners", f"PLAINTEXT://{self.host}:{listen}")
        self.props.setdefault("advertised.listeners", f"PLAINTEXT://{self.host}:{self.port}")
        super().write_properties()

    def _signal(self, sig: int, timeout: float) -> int | None:
        if self.paused and self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process cannot exit on SIGTERM
            self.paused = False
        pid = self.pid
        rc = super()._signal(sig, timeout)
        if pid is not None:
            self.state.remove_pid(pid)
        return rc

    def pause(self) -> None:
        if self.is_running():
            os.kill(self.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            self.paused = True

    def resume(self) -> None:
        if self.is_running() and self.paused:
            os.kill(self.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        self.paused = False


class ZooKeeperNode(_Tracked, ZooKeeperServer):
    """The integration tests' ZooKeeper (Debian's package) as node ``name`` of ``network``:
    its own address and port, started under the network's command prefix, PID recorded in the
    run's state file; data kept across restarts."""

    def __init__(self, directory: Path, name: str, network: Network, state: RunState) -> None:
        super().__init__(directory, startup_timeout=60.0)
        self.name, self.network, self.state = name, network, state
        self.host = network.host(name)
        self.port = network.port(name, ZK_PORT)
        self.listen_port = network.listen_port(name, ZK_PORT)
        self.command_prefix = network.command_prefix(name)
        self.paused = False

    def _signal(self, sig: int, timeout: float) -> int | None:
        pid = self.pid
        rc = super()._signal(sig, timeout)
        self.paused = False
        if pid is not None:
            self.state.remove_pid(pid)
        return rc

    def pause(self) -> None:
        super().pause()
        self.paused = self.is_running()

    def resume(self) -> None:
        if self.paused:
            super().resume()
        self.paused = False
