"""The josef CLI: help, exit codes, Kafka log layout, tool registry, --daemon and pid files."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import cli as tools_pkg
from broker import cli, daemon

REPO = Path(__file__).resolve().parents[3]

# Runs broker.cli.main with a stand-in broker.server whose run_server waits for SIGTERM.
FAKE_SERVER_RUNNER = textwrap.dedent("""
    import asyncio, logging, signal, sys, types
    mod = types.ModuleType("broker.server")
    async def run_server(config, on_started=None):
        if "fail" in sys.argv[1:2]:
            raise RuntimeError("cannot bind")
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        logging.getLogger("fake.server").info("up, port %d", config.listeners[0].port)
        if on_started is not None:
            port = listener.sockets[0].getsockname()[1]
            on_started(types.SimpleNamespace(broker_id=0, socket_server=types.SimpleNamespace(
                bound_endpoints=[f"PLAINTEXT://127.0.0.1:{port}"])))
        await stop.wait()
        listener.close()
        logging.getLogger("fake.server").info("stopped")
    mod.run_server = run_server
    sys.modules["broker.server"] = mod
    from broker.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def run_cli(args, *, mode="ok", cwd=None, timeout=30):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", FAKE_SERVER_RUNNER, mode, *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL)


def write_props(tmp_path, text="listeners=PLAINTEXT://127.0.0.1:0\n") -> Path:
    path = tmp_path / "server.properties"
    path.write_text(text + f"log.dirs={tmp_path / 'logs'}\n")
    return path


def test_help_lists_server():
    out = subprocess.run([sys.executable, "-m", "broker.cli", "--help"], capture_output=True,
                         text=True, timeout=30, cwd=REPO)
    assert out.returncode == 0
    assert "server" in out.stdout and "Run a broker" in out.stdout


def test_python_m_broker_bad_value_exits_2_naming_the_key(tmp_path):
    props = write_props(tmp_path)
    out = subprocess.run([sys.executable, "-m", "broker", str(props), "--override",
                          "num.io.threads=many"], capture_output=True, text=True, timeout=30,
                         cwd=REPO)
    assert out.returncode == 2
    assert "num.io.threads" in out.stderr and "'many'" in out.stderr
    assert "[1,...]" in out.stderr


def test_missing_config_file_exits_2(tmp_path):
    out = run_cli(["server", str(tmp_path / "absent.properties")])
    assert out.returncode == 2 and "absent.properties" in out.stderr


def test_foreground_run_logs_in_kafka_layout_and_exits_0_on_sigterm(tmp_path):
    props = write_props(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0\nbogus.key=1\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", FAKE_SERVER_RUNNER, "ok", "server",
                             str(props)], stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stderr.readline()
        assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] WARNING The configuration "
                            r"'bogus.key' was supplied but isn't a known config\. "
                            r"\(broker\.config\)\n", first), first
        limits = proc.stderr.readline()  # both open files limits, as the broker starts
        assert re.search(r"INFO open files limit \(RLIMIT_NOFILE\): soft \S+", limits), limits
        assert "INFO up, port 0 (fake.server)" in proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


def test_server_failure_exits_1(tmp_path):
    out = run_cli(["server", str(write_props(tmp_path))], mode="fail")
    assert out.returncode == 1
    assert "cannot bind" in out.stderr and "ERROR" in out.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a reparented daemon may linger as a zombie where PID 1 does not reap
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_daemon_detaches_with_pid_and_log_file(tmp_path):
    props = write_props(tmp_path)
    pid_file, log_file = tmp_path / "run" / "josef.pid", tmp_path / "out" / "josef.out"
    started = time.monotonic()
    out = run_cli(["server", str(props), "--daemon", "--pid-file", str(pid_file),
                   "--log-file", str(log_file)], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - started < 15
    pid = int(pid_file.read_text())
    assert f"(pid {pid}), accepting connections on PLAINTEXT://127.0.0.1:" in out.stdout
    try:
        assert _alive(pid)
        # its own session (setsid), and not its leader (second fork): it cannot get a terminal
        assert os.getsid(pid) not in (os.getsid(0), pid)
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
        deadline = time.monotonic() + 10
        while "up, port 0" not in log_file.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "INFO up, port 0 (fake.server)" in log_file.read_text()
        # a second daemon on the same pid file refuses to start
        again = run_cli(["server", str(props), "--daemon", "--pid-file", str(pid_file),
                         "--log-file", str(log_file)], cwd=tmp_path)
        assert again.returncode == 1 and f"pid {pid}" in again.stderr
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
        assert not pid_file.exists()
        assert "INFO stopped (fake.server)" in log_file.read_text()
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_pid_file_helpers(tmp_path):
    pf = str(tmp_path / "x.pid")
    assert daemon.running_pid(pf) is None
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        daemon.write_pid_file(pf, sleeper.pid)
        assert daemon.running_pid(pf) == sleeper.pid
        daemon.remove_pid_file(pf)  # not ours: kept
        assert Path(pf).exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert daemon.running_pid(pf) is None  # stale
    daemon.write_pid_file(pf)
    daemon.remove_pid_file(pf)
    assert not Path(pf).exists()


def test_tool_registry_discovers_and_isolates_tools(tmp_path, monkeypatch, capsys):
    (tmp_path / "zz_echo.py").write_text(textwrap.dedent("""
        COMMAND = "echo"
        HELP = "Print the words"
        def add_arguments(parser):
            parser.add_argument("words", nargs="*")
        def run(args):
            print(" ".join(args.words))
            return 3
    """))
    (tmp_path / "zz_broken.py").write_text("raise ImportError('missing dependency')\n")
    (tmp_path / "_helper.py").write_text("raise AssertionError('helpers are not imported')\n")
    monkeypatch.setattr(tools_pkg, "__path__", [*tools_pkg.__path__, str(tmp_path)])
    for name in ("cli.zz_echo", "cli.zz_broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    commands = cli.discover_commands()
    assert set(commands) >= {"server", "echo"}
    assert cli.main(["echo", "a", "b"]) == 3
    captured = capsys.readouterr()
    assert "a b" in captured.out
    assert "zz_broken" in captured.err and "missing dependency" in captured.err


def test_setup_logging_to_file(tmp_path):
    log_file = tmp_path / "d" / "server.log"
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        cli.setup_logging("DEBUG", str(log_file))
        logging.getLogger("kafka.like").debug("hello %s", "world")
        for h in root.handlers:
            h.flush()
        line = log_file.read_text().splitlines()[-1]
        assert re.fullmatch(r"\[[\d\- :,]+\] DEBUG hello world \(kafka\.like\)", line)
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
            h.close()
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])


@pytest.mark.parametrize("argv", [["--version"], ["server", "--help"]])
def test_informational_flags_exit_0(argv):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 0
