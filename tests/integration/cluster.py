"""Cluster test fixture: a real ZooKeeper (Debian's ``zookeeper`` package) and N brokers.

``ZooKeeperServer`` runs ``java -cp /usr/share/java/zookeeper.jar[:slf4j-simple.jar]
org.apache.zookeeper.server.quorum.QuorumPeerMain <dir>/zoo.cfg`` (the jar's manifest names
its dependencies, so the package's own classpath is used) on a free 127.0.0.1 port with its
own data dir, admin server off, and ``tickTime`` 500 ms (sessions from 1 s to 60 s). Ready =
the four-letter ``ruok`` answers ``imok``. It is stopped by PID: ``stop()`` (SIGTERM, then
SIGKILL), ``kill()`` (SIGKILL), ``pause()``/``resume()`` (SIGSTOP/SIGCONT: ZooKeeper
unreachable, sessions keep their clock on the server side only once it runs again),
``restart()`` (same port and data: sessions survive a quick restart).

``Cluster`` is N :class:`~tests.integration.harness.BrokerProcess` es (ids 1..N by default)
pointed at that ZooKeeper under a chroot of their own (``/josef-<random>``, so clusters may
share one ZooKeeper), with ``zookeeper.session.timeout.ms=6000`` and
``controlled.shutdown.retry.backoff.ms`` short, as tests want them. Helpers:

- ``bootstrap`` (every running broker), ``broker(id)``, ``start()``/``stop(kill=False)`` (all),
  ``kill(id)`` (kill -9), ``pause(id)``/``resume(id)`` (SIGSTOP/SIGCONT), ``stop_broker(id)``
  (SIGTERM: controlled shutdown), ``start_broker(id)``/``restart(id)``;
- ZooKeeper reads (a kazoo client of the test process, chroot applied): ``zk_get(path)`` ->
  ``(bytes | None, stat) | None``, ``zk_json(path)``, ``zk_children(path)``,
  ``controller_id()``, ``controller_epoch()``, ``partition_state(topic, p)``;
- waits (poll with a deadline, raise ``AssertionError`` with what was last seen):
  ``wait_until(what, predicate, timeout)``, ``wait_for_controller(exclude=(), timeout)``,
  ``wait_for_brokers_registered(ids)``,
  ``wait_for_leaders(topic, num_partitions, timeout)`` -> ``{partition: leader}`` (every
  partition has a live leader in ZooKeeper), ``wait_metadata_converged(topics, timeout)``
  (every running broker answers Metadata with the same live brokers, controller id and
  partition leaders/ISR, agreeing with ZooKeeper) -> ``{partition: leader}`` per topic;
- ``metadata(broker_id, topics)``: one Metadata round trip (project's protocol client).

pytest fixtures (tests/integration/conftest.py): ``zookeeper`` (module scope: one server per
test module), ``zk_cluster`` (module scope: 3 brokers on it), ``cluster_factory`` (function
scope: ``cluster_factory(n=3, props=None, broker_props=None) -> Cluster`` started, all stopped
at teardown). Everything runs on 127.0.0.1 and is stopped by PID; an ``atexit`` hook kills
what a crashed test left behind.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.integration.harness import _LIVE, BrokerProcess, free_port  # one atexit registry

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")
QUORUM_PEER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperStartError(RuntimeError):
    """ZooKeeper did not answer ``ruok`` in time; the message carries its log tail."""


def zookeeper_available() -> str | None:
    """None when Java and Debian's ZooKeeper jar are installed, else why not."""
    if shutil.which("java") is None:
        return "java is not installed (bash tests/setup.sh)"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper package (bash tests/setup.sh)"
    return None


def four_letter(host: str, port: int, word: bytes = b"ruok", timeout: float = 1.0) -> bytes:
    """Send a ZooKeeper four-letter command; the whole answer (the server closes after it)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word)
        out = bytearray()
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return bytes(out)
            out += chunk


class ZooKeeperServer:
    """One standalone ZooKeeper on ``127.0.0.1:<free port>`` with its data under ``directory``."""

    def __init__(self, directory: Path, *, tick_time_ms: int = 500,
                 min_session_timeout_ms: int = 1000, max_session_timeout_ms: int = 60000,
                 startup_timeout: float = 30.0, heap_mb: int = 128) -> None:
        self.dir = Path(directory)
        self.heap_mb = heap_mb  # -Xmx; 100,000 partitions need about 1 GiB
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.dir / "data"
        self.cfg_path = self.dir / "zoo.cfg"
        self.out_path = self.dir / "zookeeper.out"
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.startup_timeout = startup_timeout
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.listen_port: int | None = None  # the port bound, when not ``port`` (a proxy)
        self.command_prefix: list[str] = []  # e.g. ``ip netns exec <ns>`` (tests/faults)
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        """``127.0.0.1:<port>`` (append a chroot for brokers: ``connect + "/josef"``)."""
        if self.port is None:
            raise RuntimeError("ZooKeeper was never started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.out_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cfg_path.write_text(
            "# written by tests/integration/cluster.py\n"
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.listen_port or self.port}\n"
            f"clientPortAddress={self.host}\n"
            f"minSessionTimeout={self.min_session_timeout_ms}\n"
            f"maxSessionTimeout={self.max_session_timeout_ms}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
            "forceSync=no\n")

    def start(self) -> ZooKeeperServer:
        """Start (or restart on the same port and data) and wait for ``imok``."""
        if self.is_running():
            raise RuntimeError(f"ZooKeeper already running (pid {self.pid})")
        why = zookeeper_available()
        if why:
            raise ZooKeeperStartError(why)
        first = self.port is None
        for attempt in range(3 if first else 1):
            if first:
                self.port = free_port(self.host)
            self._write_config()
            self._spawn()
            try:
                self._wait_ready(self.startup_timeout)
                return self
            except ZooKeeperStartError:
                bind_failure = "address already in use" in self.log_tail(200).lower()
                self.kill()
                if not (first and bind_failure and attempt < 2):
                    raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        classpath = [str(ZOOKEEPER_JAR)]
        if SLF4J_BINDING.exists():
            classpath.append(str(SLF4J_BINDING))
        cmd = [*self.command_prefix, shutil.which("java") or "java", "-Xms32m", f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC",
               "-XX:TieredStopAtLevel=1", "-Dzookeeper.admin.enableServer=false",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-cp", os.pathsep.join(classpath), QUORUM_PEER_MAIN, str(self.cfg_path)]
        with open(self.out_path, "ab") as out:
            out.write(f"----- cluster.py: start on port {self.port} -----\n".encode())
            out.flush()
            self.proc = subprocess.Popen(cmd, cwd=self.dir, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        _LIVE[self.proc.pid] = self.proc

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | bytes | None = None
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with code {self.proc and self.proc.returncode} during "
                    f"startup; log {self.out_path}:\n{self.log_tail()}")
            try:
                last = four_letter(self.host, self.port)
                if last == b"imok":
                    return
            except OSError as e:
                last = e
            time.sleep(0.05)
        raise ZooKeeperStartError(f"ZooKeeper not ready after {timeout:.0f}s (last: {last!r}); "
                                  f"log {self.out_path}:\n{self.log_tail()}")

    def _signal(self, sig: int, timeout: float) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                if sig != signal.SIGKILL:
                    os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, sig)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        _LIVE.pop(proc.pid, None)
        return proc.returncode

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` s."""
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        return self._signal(signal.SIGKILL, 10.0)

    def restart(self) -> ZooKeeperServer:
        self.stop()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP: clients see ZooKeeper unreachable (connections hang, then time out)."""
        if self.is_running():
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.is_running():
            os.kill(self.proc.pid, signal.SIGCONT)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class Cluster:
    """``n`` brokers registered in ``zookeeper`` under ``chroot`` (see the module docstring).

    ``props`` go to every broker, ``broker_props[id]`` to one (e.g. ``broker.rack``)."""

    def __init__(self, directory: Path, zookeeper: ZooKeeperServer, n: int = 3, *,
                 props: Mapping[str, str] | None = None,
                 broker_props: Mapping[int, Mapping[str, str]] | None = None,
                 chroot: str | None = None, first_broker_id: int = 1,
                 session_timeout_ms: int = 6000, startup_timeout: float = 40.0) -> None:
        self.dir = Path(directory)
        self.zookeeper = zookeeper
        self.chroot = chroot or f"/josef-{secrets.token_hex(4)}"
        self.session_timeout_ms = session_timeout_ms
        self.brokers: dict[int, BrokerProcess] = {}
        self._zk: Any = None
        for i in range(first_broker_id, first_broker_id + n):
            p = {
                "zookeeper.connect": zookeeper.connect + self.chroot,
                "zookeeper.session.timeout.ms": str(session_timeout_ms),
                "zookeeper.connection.timeout.ms": "15000",
                "controlled.shutdown.retry.backoff.ms": "500",
                "offsets.topic.replication.factor": str(min(n, 3)),
                "transaction.state.log.replication.factor": str(min(n, 3)),
                "transaction.state.log.min.isr": "1",
                "share.coordinator.state.topic.replication.factor": str(min(n, 3)),
                "share.coordinator.state.topic.min.isr": "1",
                "share.coordinator.state.topic.num.partitions": "6",
                "offsets.topic.num.partitions": "6",
                "transaction.state.log.num.partitions": "6",
                "group.initial.rebalance.delay.ms": "0",
            }
            p.update(props or {})
            p.update((broker_props or {}).get(i, {}))
            self.brokers[i] = BrokerProcess(self.dir / f"broker{i}", p, broker_id=i,
                                            startup_timeout=startup_timeout)

    # ----- lifecycle ------------------------------------------------------------------------
    @property
    def ids(self) -> list[int]:
        return sorted(self.brokers)

    def running_ids(self) -> list[int]:
        return [i for i in self.ids if self.brokers[i].is_running()]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.brokers[i].bootstrap for i in self.running_ids())

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    def start(self, timeout: float = 60.0) -> Cluster:
        """Start every broker (spawned together), then wait until all are registered and a
        controller is elected."""
        waiting = []
        for b in self.brokers.values():
            if b.is_running():
                continue
            if b.port is None:
                b.port = free_port(b.host)
            b._spawn()
            waiting.append(b)
        deadline = time.monotonic() + timeout
        for b in waiting:
            b.wait_ready(max(1.0, deadline - time.monotonic()))
        self.wait_for_brokers_registered(self.ids, timeout=max(1.0, deadline - time.monotonic()))
        self.wait_for_controller(timeout=max(1.0, deadline - time.monotonic()))
        return self

    def stop(self, timeout: float = 20.0, *, kill: bool = False) -> None:
        """Stop every broker by PID (SIGCONT first for a paused one; SIGTERM to all at once,
        SIGKILL after ``timeout`` s; ``kill`` = SIGKILL at once, for a fast teardown), then
        the ZK client."""
        for i in self.ids:
            self.resume(i)
        for b in self.brokers.values():
            if b.is_running():
                try:
                    os.kill(b.pid, signal.SIGKILL if kill else signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for b in self.brokers.values():
            b.kill() if kill else b.stop(timeout)
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:  # noqa: BLE001 - teardown
                pass
            self._zk = None

    def start_broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id].start()

    def stop_broker(self, broker_id: int, timeout: float = 60.0) -> int | None:
        """SIGTERM (controlled shutdown when enabled); waits up to ``timeout`` s."""
        return self.brokers[broker_id].stop(timeout)

    def kill(self, broker_id: int) -> int | None:
        """kill -9 (a paused broker dies without running again: SIGKILL needs no SIGCONT)."""
        return self.brokers[broker_id].kill()

    def restart(self, broker_id: int, *, hard: bool = False) -> BrokerProcess:
        b = self.brokers[broker_id]
        self.kill(broker_id) if hard else b.stop()
        return b.start()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP the broker process."""
        b = self.brokers[broker_id]
        if b.is_running():
            os.kill(b.pid, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        if b.is_running():
            os.kill(b.pid, signal.SIGCONT)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ----- ZooKeeper reads -------------------------------------------------------------------
    def zk(self):
        """A kazoo client of this process on the cluster's chroot (created on first use)."""
        if self._zk is None:
            from kazoo.client import KazooClient

            client = KazooClient(hosts=self.zookeeper.connect + self.chroot, timeout=10.0)
            client.start(timeout=15)
            self._zk = client
        return self._zk

    def zk_get(self, path: str):
        """``(data, stat)`` or None when the znode does not exist."""
        from kazoo.exceptions import NoNodeError

        try:
            return self.zk().get(path)
        except NoNodeError:
            return None

    def zk_json(self, path: str) -> Any:
        got = self.zk_get(path)
        if got is None or got[0] is None:
            return None
        return json.loads(got[0].decode())

    def zk_children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return sorted(self.zk().get_children(path))
        except NoNodeError:
            return []

    def controller_id(self) -> int | None:
        doc = self.zk_json("/controller")
        return None if doc is None else doc.get("brokerid")

    def controller_epoch(self) -> int | None:
        got = self.zk_get("/controller_epoch")
        return None if got is None else int(got[0].decode())

    def partition_state(self, topic: str, partition: int) -> dict | None:
        return self.zk_json(f"/brokers/topics/{topic}/partitions/{partition}/state")

    def registered_brokers(self) -> list[int]:
        return sorted(int(c) for c in self.zk_children("/brokers/ids"))

    # ----- waits -----------------------------------------------------------------------------
    @staticmethod
    def _poll(what: str, fn, timeout: float, interval: float = 0.1):
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                ok, last = fn()
            except Exception as e:  # noqa: BLE001 - retried until the deadline
                ok, last = False, repr(e)
            if ok:
                return last
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}; "
                                     f"last seen: {last!r}")
            time.sleep(interval)

    def wait_until(self, what: str, predicate, timeout: float = 30.0, interval: float = 0.1):
        """Poll ``predicate()`` until it returns a truthy value (returned); AssertionError
        naming ``what`` after ``timeout`` s."""
        def check():
            got = predicate()
            return bool(got), got
        return self._poll(what, check, timeout, interval)

    def wait_for_brokers_registered(self, ids: Iterable[int], timeout: float = 30.0) -> None:
        want = sorted(ids)
        self._poll(f"brokers {want} registered", lambda: (
            set(want) <= set(got := self.registered_brokers()), got), timeout)

    def wait_for_controller(self, exclude: Iterable[int] = (), timeout: float = 30.0) -> int:
        """The id of an elected controller that is not in ``exclude``."""
        excluded = set(exclude)

        def check():
            cid = self.controller_id()
            return cid is not None and cid not in excluded, cid
        return self._poll(f"a controller not in {sorted(excluded)}", check, timeout)

    def wait_for_leaders(self, topic: str, num_partitions: int, timeout: float = 30.0,
                         exclude: Iterable[int] = ()) -> dict[int, int]:
        """``{partition: leader}`` once every partition's state znode names a registered
        leader not in ``exclude``."""
        excluded = set(exclude)

        def check():
            live = set(self.registered_brokers())
            leaders = {}
            for p in range(num_partitions):
                st = self.partition_state(topic, p)
                leaders[p] = None if st is None else st["leader"]
            ok = all(v in live and v not in excluded for v in leaders.values())
            return ok, leaders
        return self._poll(f"leaders of {topic}", check, timeout)

    def metadata(self, broker_id: int, topics: list[str] | None = None):
        """One Metadata request to ``broker_id`` (no auto-creation)."""
        from client.connection import KafkaClient

        with KafkaClient(self.brokers[broker_id].bootstrap, client_id="cluster-fixture",
                         timeout=10.0) as c:
            return c.metadata(topics)

    def wait_metadata_converged(self, topics: Iterable[str] = (), timeout: float = 30.0
                                ) -> dict[str, dict[int, int]]:
        """Wait until every running broker's Metadata agrees with ZooKeeper: the registered
        brokers, the controller id, and for ``topics`` each partition's leader and ISR.
        Returns ``{topic: {partition: leader}}``."""
        names = list(topics)

        def check():
            live = self.registered_brokers()
            running = self.running_ids()
            cid = self.controller_id()
            want: dict[str, dict[int, tuple[int, list[int]]]] = {}
            for t in names:
                parts = self.zk_children(f"/brokers/topics/{t}/partitions")
                want[t] = {}
                for p in sorted(int(x) for x in parts):
                    st = self.partition_state(t, p)
                    if st is None:
                        return False, f"{t}-{p} has no state znode"
                    want[t][p] = (st["leader"], sorted(st["isr"]))
                if not want[t]:
                    return False, f"{t} has no partitions in ZooKeeper"
            if sorted(live) != running:
                return False, f"registered {live} != running {running}"
            for i in running:
                md = self.metadata(i, names)
                brokers = sorted(b.node_id for b in md.brokers)
                if brokers != live:
                    return False, f"broker {i} lists brokers {brokers}, registered {live}"
                if md.controller_id != cid:
                    return False, f"broker {i} says controller {md.controller_id}, ZK {cid}"
                for t in md.topics:
                    got = {p.partition_index: (p.leader_id, sorted(p.isr_nodes))
                           for p in t.partitions}
                    if t.error_code or got != want[t.name]:
                        return False, f"broker {i}: {t.name} {t.error_code} {got} != {want[t.name]}"
            return True, {t: {p: v[0] for p, v in ps.items()} for t, ps in want.items()}
        return self._poll(f"metadata of {names} converged", check, timeout, interval=0.2)
