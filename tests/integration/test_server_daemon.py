"""``josef server --daemon`` answers only once the broker is up (or with its last error), and
locations the server cannot write give one clear line (issue 25)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.harness import REPO_ROOT, api_versions_probe
from tests.integration.test_server_lifecycle import _alive

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

STARTED_RE = re.compile(r"broker (\d+) started in the background \(pid (\d+)\), accepting "
                        r"connections on PLAINTEXT://127\.0\.0\.1:(\d+)")


def _josef(*args: str, cwd: Path | str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("LOG_DIR", None)
    return subprocess.run([sys.executable, "-m", "broker.cli", "server", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _props(path: Path, **extra: str) -> Path:
    props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
             "log.dirs": str(path.parent / f"data-{path.stem}")} | {
                 k.replace("_", "."): v for k, v in extra.items()}
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _kill(pid_file: Path) -> None:
    try:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def _dead_soon(pid: int, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "Logging error" not in err, err
    return lines[0]


def test_daemon_returns_once_the_broker_accepts_connections(tmp_path):
    pid_file = tmp_path / "b.pid"
    out = _josef(str(_props(tmp_path / "a.properties")), "--daemon", "--pid-file",
                 str(pid_file), "--log-file", str(tmp_path / "b.out"), cwd=tmp_path)
    try:
        assert out.returncode == 0, out.stderr
        m = STARTED_RE.search(out.stdout)
        assert m, out.stdout
        assert int(m.group(2)) == int(pid_file.read_text())
        api_versions_probe("127.0.0.1", int(m.group(3)))  # at once: no retry loop
    finally:
        _kill(pid_file)


def test_daemon_port_in_use_exits_1_with_the_brokers_error(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    pid_file, log_file = tmp_path / "b.pid", tmp_path / "b.out"
    try:
        out = _josef(str(_props(tmp_path / "a.properties",
                                listeners=f"PLAINTEXT://127.0.0.1:{port}")),
                     "--daemon", "--pid-file", str(pid_file), "--log-file", str(log_file),
                     cwd=tmp_path)
    finally:
        taken.close()
    assert out.returncode == 1, out
    line = _one_line(out.stderr)
    assert "the broker failed to start" in line and "address already in use" in line, line
    assert f"127.0.0.1:{port}" in line and str(log_file) in line
    assert "started" not in out.stdout
    assert not pid_file.exists()  # the daemon removed it on its way out


def test_daemon_zookeeper_registration_refused(tmp_path, zookeeper):
    """A second broker with a registered broker.id: Kafka's NodeExistsException, reported
    (after waiting a session timeout, in case the registration were its own from before a
    crash)."""
    zk = zookeeper.connect + "/daemon-test"
    first_pid = tmp_path / "first.pid"
    first = _josef(str(_props(tmp_path / "first.properties", broker_id="5",
                              zookeeper_connect=zk, zookeeper_session_timeout_ms="2000")),
                   "--daemon", "--pid-file", str(first_pid), "--log-file",
                   str(tmp_path / "first.out"), cwd=tmp_path)
    try:
        assert first.returncode == 0, first.stderr
        second = _josef(str(_props(tmp_path / "second.properties", broker_id="5",
                                   zookeeper_connect=zk, zookeeper_session_timeout_ms="2000")),
                        "--daemon", "--pid-file", str(tmp_path / "second.pid"),
                        "--log-file", str(tmp_path / "second.out"), cwd=tmp_path)
        assert second.returncode == 1, second
        line = _one_line(second.stderr)
        assert "/brokers/ids/5" in line and "already exists" in line, line
        assert _alive(int(first_pid.read_text()))
    finally:
        _kill(first_pid)


def test_daemon_killed_during_startup_reports_exit(tmp_path):
    """The daemon dies without a word (SIGKILL while ZooKeeper is unreachable)."""
    pid_file = tmp_path / "b.pid"
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "server",
         str(_props(tmp_path / "a.properties", zookeeper_connect="127.0.0.1:1",
                    zookeeper_connection_timeout_ms="60000")),
         "--daemon", "--pid-file", str(pid_file), "--log-file", str(tmp_path / "b.out")],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=20)
        assert proc.returncode == 1
        line = _one_line(err)
        assert f"the broker (pid {pid}) exited during startup" in line, line
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill(pid_file)


def test_daemon_gives_up_waiting_after_wait_seconds(tmp_path):
    pid_file = tmp_path / "b.pid"
    started = time.monotonic()
    out = _josef(str(_props(tmp_path / "a.properties", zookeeper_connect="127.0.0.1:1",
                            zookeeper_connection_timeout_ms="60000")),
                 "--daemon", "--wait", "2", "--pid-file", str(pid_file), "--log-file",
                 str(tmp_path / "b.out"), cwd=tmp_path)
    try:
        assert out.returncode == 1
        assert time.monotonic() - started < 30
        assert "has not finished starting after 2 s" in _one_line(out.stderr)
        assert _alive(int(pid_file.read_text()))  # still starting: left running
    finally:
        _kill(pid_file)


# ----- locations the server cannot write -------------------------------------------------------

@pytest.fixture
def unwritable_dir(tmp_path) -> Path:
    """A directory this process cannot create files in: sysfs for root (which ignores mode
    bits), else a 0555 directory."""
    if os.geteuid() == 0:
        if not os.path.isdir("/sys/kernel"):
            pytest.skip("no sysfs to stand for an unwritable directory")
        return Path("/sys")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    return ro


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
def test_unwritable_working_directory_gives_one_line(tmp_path, unwritable_dir, daemon):
    props = _props(tmp_path / "a.properties")
    out = _josef(str(props), *(["--daemon"] if daemon else []), cwd=unwritable_dir,
                 timeout=30)
    assert out.returncode == 1
    line = _one_line(out.stderr)
    assert line.startswith(f"josef: cannot write the operational logs directory "
                           f"{unwritable_dir / 'logs'}: "), line
    assert "--log-dir" in line


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
def test_unwritable_log_file_gives_one_line(tmp_path, unwritable_dir, daemon):
    log_file = unwritable_dir / "josef.out"
    out = _josef(str(_props(tmp_path / "a.properties")), *(["--daemon"] if daemon else []),
                 "--log-file", str(log_file), "--log-dir", str(tmp_path / "oplogs"),
                 "--pid-file", str(tmp_path / "b.pid"), cwd=tmp_path, timeout=30)
    assert out.returncode == 1
    line = _one_line(out.stderr)
    assert line.startswith(f"josef: cannot write the log file {log_file}: "), line
    assert "--log-file" in line
