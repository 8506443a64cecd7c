"""A Spark standalone cluster on loopback for the tests: one master, N workers.

Started from PySpark's own launcher (``$SPARK_HOME/bin/spark-class`` with
``org.apache.spark.deploy.master.Master`` / ``org.apache.spark.deploy.worker.Worker``, the
classes Spark's ``sbin/start-master.sh`` and ``start-worker.sh`` run), each a JVM bound to
127.0.0.1 on ports picked here, logging to its own file under the cluster's directory.
Applications connect to :attr:`StandaloneCluster.master_url`; each worker runs their
executors as separate JVM processes, and those start their own Python workers.

Readiness is the master's JSON status page (``http://127.0.0.1:<ui port>/json/``) showing
every worker ALIVE. :meth:`stop` signals every process by PID (SIGTERM, then SIGKILL after
a grace period); a worker takes its executors down with it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def spark_home() -> Path:
    """The Spark distribution inside the installed ``pyspark`` package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Spark processes: loopback only, this interpreter for Python workers,
    small daemon heaps."""
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    })
    env.pop("PYTHONPATH", None)  # executors get the connector from the application
    env.update(extra or {})
    return env


def descendants(pid: int) -> list[int]:
    """PIDs of every live process below ``pid`` (zombies left, e.g. by ``spark-class``'s
    launcher, which the exec'd JVM never reaps, are not counted)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            state, ppid = fields[0], int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
        if state != "Z":
            children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it, by PID (a driver dying at once)."""
    for target in [pid, *descendants(pid)]:
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass


def spark_submit(master_url: str, script: str, args: list[str], **popen) -> subprocess.Popen:
    """``spark-submit`` of a Python ``script`` to the cluster, the driver on this machine
    with the repository on its PYTHONPATH (the streaming planner workers import the
    connector from there; executors get it shipped by ``register``)."""
    repo = Path(__file__).resolve().parents[3]
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", master_url,
           "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
           "--conf", "spark.cores.max=2", "--conf", "spark.driver.host=127.0.0.1",
           "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.python.authenticate.socketTimeout=120s", script, *args]
    return subprocess.Popen(cmd, env=spark_env({"PYTHONPATH": str(repo)}),
                            stdin=subprocess.DEVNULL, start_new_session=True, **popen)


class StandaloneCluster:
    """Master + ``workers`` workers (``cores`` cores and ``memory`` each) under ``directory``."""

    def __init__(self, directory: Path, workers: int = 2, cores: int = 1,
                 memory: str = "1g", startup_timeout: float = 120.0) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.ui_port = free_port()
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, args: list[str]) -> None:
        log = self.dir / f"{name}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            # spark-class execs the JVM, so this PID is the JVM's.
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args], stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=spark_env(
                    {"SPARK_LOG_DIR": str(self.dir), "SPARK_LOCAL_DIRS": str(self.dir / "tmp"),
                     "SPARK_WORKER_DIR": str(self.dir / f"{name}-work")}),
                start_new_session=True)
        self.procs.append(proc)

    def start(self) -> StandaloneCluster:
        self._launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                "--port", str(self.port), "--webui-port", str(self.ui_port)])
        for i in range(self.workers):
            self._launch(f"worker{i}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--port", str(free_port()), "--webui-port", str(free_port()),
                "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", str(self.dir / f"worker{i}-work"), self.master_url])
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                self.stop()
                raise RuntimeError(f"a Spark daemon exited at start-up:\n{self.log_tails()}")
            if self.alive_workers() >= self.workers:
                return self
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"Spark master did not see {self.workers} workers in "
                           f"{self.startup_timeout:g}s:\n{self.log_tails()}")

    def status(self) -> dict:
        """The master's JSON status (workers, applications); {} while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/",
                                        timeout=5) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return {}

    def alive_workers(self) -> int:
        return sum(1 for w in self.status().get("workers", []) if w.get("state") == "ALIVE")

    def executor_pids(self) -> list[int]:
        """PIDs of executor JVMs (and their Python workers) below the workers, now."""
        return [pid for worker in self.procs[1:] for pid in descendants(worker.pid)]

    def executor_jvms(self) -> list[int]:
        """PIDs of the executor JVMs (CoarseGrainedExecutorBackend) running now."""
        out = []
        for pid in self.executor_pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"CoarseGrainedExecutorBackend" in cmdline:
                out.append(pid)
        return out

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until no application runs (its executors released the workers' cores)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.status().get("activeapps") and not self.executor_pids():
                return
            time.sleep(0.5)
        raise TimeoutError("an application is still running on the Spark cluster")

    def log_tails(self, lines: int = 30) -> str:
        out = []
        for log in self.logs:
            try:
                text = log.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                text = []
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every daemon (workers first), SIGKILL what is left after ``grace`` s;
        executors a worker left behind are killed by PID too."""
        executors = self.executor_pids() if self.procs else []
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for pid in executors:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs = []
