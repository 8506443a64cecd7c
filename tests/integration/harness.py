"""Integration-test harness: a broker subprocess on loopback, plus kcat and Java client helpers.

``BrokerProcess`` writes a ``server.properties`` into its directory (ephemeral 127.0.0.1
port, temporary log dirs), starts ``python -m broker <props>`` with stdout/stderr going to
``broker.out`` there, and waits (bounded) until the port accepts connections *and* an
ApiVersions v0 round trip succeeds. ``stop()`` sends SIGTERM then SIGKILL after a grace
period; ``kill()`` sends SIGKILL; ``start()`` again reuses the same dirs and port. Everything
is addressed by PID; an ``atexit`` hook kills any broker a crashed test left running.

The ApiVersions probe is encoded here by hand (request header v1, empty v0 body), not with
the project's codec, so a codec bug cannot make the harness believe a broken broker is up.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
JAVA_SRC = REPO_ROOT / "tests" / "java" / "JosefClient.java"
JAVA_BUILD = REPO_ROOT / "tests" / "java" / "build"
JAVA_JARS = ("kafka-clients.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar",
             "slf4j-api.jar")

#: The line Kafka's Acceptor logs once a listener is bound ("Awaiting socket connections on
#: host:port."); with ``port_from_log=True`` the harness reads the OS-chosen port from it.
BOUND_PORT_RE = re.compile(rb"Awaiting socket connections on \[?[^\s\]]*\]?:(\d+)")

_LIVE: dict[int, subprocess.Popen] = {}


def _kill_leftovers() -> None:
    for pid, proc in list(_LIVE.items()):
        if proc.poll() is None:
            try:
                os.kill(pid, signal.SIGCONT)  # a paused process (SIGSTOP) too
                os.kill(pid, signal.SIGKILL)
                proc.wait(5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        _LIVE.pop(pid, None)


atexit.register(_kill_leftovers)


class BrokerStartError(RuntimeError):
    """The broker did not become ready; the message carries the tail of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on ``host`` a moment ago (the OS picked it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def api_versions_probe(host: str, port: int, timeout: float = 2.0) -> list[tuple[int, int, int]]:
    """One ApiVersions v0 round trip; returns ``[(api_key, min, max), ...]``.

    Request: size | api_key=18 int16 | api_version=0 int16 | correlation_id int32 |
    client_id (int16 length + bytes) — header v1, empty body. Response: size |
    correlation_id int32 | error_code int16 | [api_key, min, max] int16 x3 (int32 count).
    Raises ``OSError`` / ``ValueError`` when anything is off.
    """
    correlation_id = 0x4A05EF
    client_id = b"josef-harness"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        if not 6 <= size <= 1 << 20:
            raise ValueError(f"implausible ApiVersions response size {size}")
        resp = recv_exact(s, size)
    cid, error_code = struct.unpack_from(">ih", resp, 0)
    if cid != correlation_id:
        raise ValueError(f"correlation id {cid} != {correlation_id}")
    if error_code != 0:
        raise ValueError(f"ApiVersions error code {error_code}")
    (count,) = struct.unpack_from(">i", resp, 6)
    if count < 0 or 10 + 6 * count > len(resp):
        raise ValueError(f"bad ApiVersions array length {count}")
    return [struct.unpack_from(">hhh", resp, 10 + 6 * i) for i in range(count)]


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


class BrokerProcess:
    """A Josef broker subprocess on ``127.0.0.1:<ephemeral port>`` with its own log dirs.

    ``props`` are extra/overriding server.properties entries (Kafka key names). The port is
    picked on the first ``start()`` (retrying with a new port if the broker cannot bind) and
    kept across restarts. With ``port_from_log`` the first start uses
    ``listeners=PLAINTEXT://127.0.0.1:0`` and reads the bound port from the broker's log
    (:data:`BOUND_PORT_RE`) instead of picking one. ``command`` replaces ``python -m broker`` (the properties path and
    ``extra_args`` follow it).
    """

    def __init__(self, directory: Path, props: Mapping[str, str] | None = None, *,
                 startup_timeout: float = 20.0, broker_id: int = 0,
                 extra_args: Sequence[str] = (), command: Sequence[str] | None = None,
                 port_from_log: bool = False):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.dir / "kafka-logs"
        self.properties_path = self.dir / "server.properties"
        self.out_path = self.dir / "broker.out"
        self.props = dict(props or {})
        self.startup_timeout = startup_timeout
        self.broker_id = broker_id
        self.extra_args = list(extra_args)
        self.command = list(command or [sys.executable, "-m", "broker"])
        self.port_from_log = port_from_log
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._log_offset = 0

    # ----- properties -----
    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("broker was never started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.out_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def write_properties(self) -> None:
        props = {
            "broker.id": str(self.broker_id),
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.log_dir),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(self.props)
        text = "# written by tests/integration/harness.py\n" + "".join(
            f"{k}={v}\n" for k, v in props.items())
        self.properties_path.write_text(text)

    # ----- lifecycle -----
    def start(self) -> BrokerProcess:
        """Start (or restart on the same dirs and port) and wait until ready."""
        if self.is_running():
            raise RuntimeError(f"broker already running (pid {self.pid})")
        first = self.port is None
        attempts = 3 if first else 1
        for attempt in range(attempts):
            if first:
                self.port = 0 if self.port_from_log else free_port(self.host)
            self._spawn()
            try:
                deadline = time.monotonic() + self.startup_timeout
                if self.port == 0:
                    self.port = self._wait_bound_port(deadline)
                self.wait_ready(max(0.0, deadline - time.monotonic()))
                return self
            except BrokerStartError:
                exited = self.proc is not None and self.proc.poll() is not None
                bind_failure = "in use" in self.log_text().lower()
                self.kill()
                if not (first and exited and bind_failure and attempt + 1 < attempts):
                    raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self.write_properties()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
        env["PYTHONUNBUFFERED"] = "1"
        self.starts += 1
        with open(self.out_path, "ab") as out:
            self._log_offset = out.tell()
            out.write(f"----- harness: start #{self.starts} on port {self.port} -----\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [*self.command, str(self.properties_path), *self.extra_args],
                cwd=self.dir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )
        _LIVE[self.proc.pid] = self.proc

    def _wait_bound_port(self, deadline: float) -> int:
        offset = self._log_offset
        while time.monotonic() < deadline:
            with open(self.out_path, "rb") as f:
                f.seek(offset)
                m = BOUND_PORT_RE.search(f.read())
            if m:
                return int(m.group(1))
            if self.proc is None or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        rc = None if self.proc is None else self.proc.poll()
        raise BrokerStartError(
            f"no 'Awaiting socket connections on host:port' line in the log (exit code {rc}); "
            f"log {self.out_path}:\n" + self.log_tail())

    def wait_ready(self, timeout: float) -> None:
        """Wait until the port answers an ApiVersions round trip; else ``BrokerStartError``."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                rc = None if self.proc is None else self.proc.returncode
                raise BrokerStartError(
                    f"broker exited with code {rc} during startup; log {self.out_path}:\n"
                    + self.log_tail())
            try:
                api_versions_probe(self.host, self.port, timeout=1.0)
                return
            except (OSError, ValueError) as e:
                last_error = e
                time.sleep(0.05)
        raise BrokerStartError(
            f"broker not ready after {timeout:.0f}s (last probe error: {last_error!r}); "
            f"log {self.out_path}:\n" + self.log_tail())

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL. Returns the exit code."""
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL (no clean shutdown). Returns the exit code."""
        return self._signal(signal.SIGKILL, 10.0)

    def restart(self, *, hard: bool = False) -> BrokerProcess:
        """Stop (SIGKILL if ``hard``) and start again on the same dirs and port."""
        self.kill() if hard else self.stop()
        return self.start()

    def _signal(self, sig: int, timeout: float) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.kill(proc.pid, sig)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        _LIVE.pop(proc.pid, None)
        return proc.returncode

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ----- kcat ---------------------------------------------------------------------------------

def require_tool(name: str) -> str:
    """Path of ``name``; in CI (``CI`` set) a missing tool fails, elsewhere it skips."""
    import pytest

    path = shutil.which(name)
    if path is None:
        msg = f"{name} is not installed (bash tests/setup.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def run_kcat(args: Sequence[str], *, input: bytes | None = None,
             timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run ``kcat ARGS`` (bounded by ``timeout``); returns the completed process (bytes)."""
    kcat = require_tool("kcat")
    return subprocess.run([kcat, *args], input=input, capture_output=True, timeout=timeout,
                          check=False)


def kcat_produce(bootstrap: str, topic: str, lines: Sequence[bytes], *, key_delim: str = ":",
                 compression: str = "none", extra: Sequence[str] = (),
                 timeout: float = 30.0) -> subprocess.CompletedProcess:
    """``kcat -P``: one record per line, ``key<key_delim>value``."""
    args = ["-b", bootstrap, "-t", topic, "-P", "-K", key_delim, "-z", compression, *extra]
    return run_kcat(args, input=b"\n".join(lines) + b"\n", timeout=timeout)


def kcat_consume(bootstrap: str, topic: str, count: int, *, extra: Sequence[str] = (),
                 timeout: float = 30.0) -> subprocess.CompletedProcess:
    """``kcat -C`` from the beginning, exit after ``count`` records or at the end of data.

    Output format: ``partition offset key value`` separated by tabs, one record per line.
    """
    args = ["-b", bootstrap, "-t", topic, "-C", "-o", "beginning", "-c", str(count), "-e",
            "-f", "%p\t%o\t%k\t%s\n", *extra]
    return run_kcat(args, timeout=timeout)


# ----- the Java client ------------------------------------------------------------------------

def java_jar_dir() -> Path:
    """``pyflink/lib`` of the installed ``shigawire-apache-flink-libraries`` distribution."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("shigawire-apache-flink-libraries")
    except PackageNotFoundError:
        raise FileNotFoundError(
            "shigawire-apache-flink-libraries is not installed (bash tests/setup.sh)") from None
    return Path(dist.locate_file("pyflink/lib"))


def java_classpath() -> str:
    lib = java_jar_dir()
    jars = [lib / j for j in JAVA_JARS if (lib / j).exists()]
    if not jars or jars[0].name != "kafka-clients.jar":
        raise FileNotFoundError(f"kafka-clients.jar not found under {lib}")
    return os.pathsep.join([str(JAVA_BUILD), *map(str, jars)])


def build_java_client() -> str:
    """Compile ``tests/java/JosefClient.java`` into ``tests/java/build`` unless up to date.

    Returns the classpath to run it with. Raises ``FileNotFoundError`` without javac or jars.
    """
    javac = shutil.which("javac")
    if javac is None:
        raise FileNotFoundError("javac is not installed (bash tests/setup.sh)")
    classpath = java_classpath()
    stamp = JAVA_BUILD / ".stamp"
    wanted = f"{JAVA_SRC.stat().st_mtime_ns} {zlib.crc32(JAVA_SRC.read_bytes())} {classpath}"
    if stamp.exists() and stamp.read_text() == wanted:
        return classpath
    JAVA_BUILD.mkdir(parents=True, exist_ok=True)
    subprocess.run([javac, "-nowarn", "-d", str(JAVA_BUILD), "-cp", classpath, str(JAVA_SRC)],
                   check=True, capture_output=True, timeout=120)
    stamp.write_text(wanted)
    return classpath


@dataclass
class JavaResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def run_java_client(classpath: str, command: str, *args: str,
                    timeout: float = 60.0) -> JavaResult:
    """Run ``JosefClient <command> args...`` (bounded); see JosefClient.java for the output."""
    java = shutil.which("java")
    if java is None:
        raise FileNotFoundError("java is not installed (bash tests/setup.sh)")
    proc = subprocess.run([java, "-cp", classpath, "JosefClient", command, *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    return JavaResult(proc.returncode, proc.stdout, proc.stderr)


def java_value(i: int, size: int) -> bytes:
    """The value JosefClient produces for record ``i``: byte j is ``(i + j) % 256``."""
    return bytes((i + j) % 256 for j in range(size))
