"""The processes of a fault run: ZooKeeper and the brokers, each in its place in the network.

``BrokerNode`` is the integration tests' ``BrokerProcess`` (server.properties, readiness by
an ApiVersions round trip, SIGTERM/SIGKILL by PID) started under the network's command prefix
(``ip netns exec <ns>``) on its own address and fixed port, its PID recorded in the run's
state file the moment it is spawned. ``ZooKeeperNode`` is the same for Debian's ZooKeeper.
Both add ``pause()``/``resume()`` (SIGSTOP/SIGCONT).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tests.faults.net import Network
from tests.faults.state import RunState
from tests.integration.harness import BrokerProcess

BROKER_PORT = 9092
ZK_PORT = 2181
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")


class BrokerNode(BrokerProcess):
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

    def _spawn(self) -> None:
        super()._spawn()
        assert self.proc is not None
        self.state.add_pid(self.proc.pid)
        self.network.node_started(self.name, self.proc.pid)

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


def zookeeper_available() -> str | None:
    if shutil.which("java") is None:
        return "java is not installed (bash tests/setup.sh)"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper (bash tests/setup.sh)"
    return None


class ZooKeeperNode:
    """A standalone ZooKeeper (Debian's package) as node ``name``; data kept across restarts."""

    def __init__(self, directory: Path, name: str, network: Network, state: RunState,
                 tick_time_ms: int = 500) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name, self.network, self.state = name, network, state
        self.host = network.host(name)
        self.port = network.port(name, ZK_PORT)
        self.tick_time_ms = tick_time_ms
        self.out_path = self.dir / "zookeeper.out"
        self.proc: subprocess.Popen | None = None
        self.paused = False

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> ZooKeeperNode:
        why = zookeeper_available()
        if why:
            raise RuntimeError(why)
        data = self.dir / "data"
        data.mkdir(exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_time_ms}\ndataDir={data}\n"
            f"clientPort={self.network.listen_port(self.name, ZK_PORT)}\n"
            f"clientPortAddress={self.host}\nminSessionTimeout=1000\n"
            "maxSessionTimeout=60000\nmaxClientCnxns=0\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr\n")
        classpath = [str(ZOOKEEPER_JAR)] + ([str(SLF4J_BINDING)] if SLF4J_BINDING.exists()
                                            else [])
        cmd = [*self.network.command_prefix(self.name), shutil.which("java") or "java",
               "-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dzookeeper.admin.enableServer=false",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-cp", os.pathsep.join(classpath),
               "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)]
        with open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=self.dir, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.state.add_pid(self.proc.pid)
        self.network.node_started(self.name, self.proc.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see "
                                   f"{self.out_path}")
            try:
                if self._four_letter(b"ruok") == b"imok":
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"ZooKeeper not ready after {timeout:.0f}s; see {self.out_path}")

    def _four_letter(self, word: bytes) -> bytes:
        with socket.create_connection((self.host, self.port), timeout=1.0) as s:
            s.sendall(word)
            out = bytearray()
            while chunk := s.recv(4096):
                out += chunk
            return bytes(out)

    def _signal(self, sig: int, timeout: float = 15.0) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, sig)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.paused = False
        self.state.remove_pid(proc.pid)
        return proc.returncode

    def stop(self) -> int | None:
        return self._signal(signal.SIGTERM)

    def kill(self) -> int | None:
        return self._signal(signal.SIGKILL)

    def pause(self) -> None:
        if self.is_running():
            os.kill(self.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            self.paused = True

    def resume(self) -> None:
        if self.is_running() and self.paused:
            os.kill(self.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        self.paused = False
