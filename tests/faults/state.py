"""What a harness run created, on disk, so that everything is removed even after the harness
itself crashed (SIGKILL, OOM, power cut of the CI job).

Each run writes ``STATE_DIR/<run id>.json``: the harness's PID (with its start time, so a
reused PID is never mistaken for it), the PIDs it started (with start times), the network
namespaces, links and bridge it made. The file is rewritten (atomically) on every change.
``sweep()``, called when a harness starts, finds files whose harness is gone and removes what
they list: processes by PID (only when the start time matches), the processes still inside
the run's namespaces (``ip netns pids``), the namespaces, the links. ``RunState.cleanup()``
does the same for the live run (atexit and SIGTERM/SIGINT/SIGHUP handlers call it).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.faults.procfs import stat_fields

log = logging.getLogger(__name__)

STATE_DIR = Path(os.environ.get("JOSEF_FAULTS_STATE_DIR", "/tmp/josef-faults-state"))


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (/proc/PID/stat field 22), or None."""
    fields = stat_fields(pid)
    try:
        return None if fields is None else int(fields[19])
    except (IndexError, ValueError):
        return None


def same_process(pid: int, start: int | None) -> bool:
    return start is not None and process_start_time(pid) == start


def kill_pid(pid: int, start: int | None, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to ``pid`` only if it is still the process that started at ``start``
    (a SIGSTOPped process is continued after SIGKILL is queued, so it dies at once)."""
    if not same_process(pid, start):
        return False
    try:
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            os.kill(pid, signal.SIGCONT)
        return True
    except ProcessLookupError:
        return False


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30)


def netns_pids(name: str) -> list[int]:
    try:
        out = _run(["ip", "netns", "pids", name])
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(x) for x in out.stdout.split() if x.isdigit()]


def remove_network(state: dict[str, Any]) -> None:
    """Kill what runs in the namespaces, delete them, the links and the bridge."""
    for ns in state.get("netns", []):
        for pid in netns_pids(ns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                os.kill(pid, signal.SIGCONT)
    for ns in state.get("netns", []):
        for _ in range(50):
            if not netns_pids(ns):
                break
            time.sleep(0.1)
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            _run(["ip", "netns", "del", ns])
    for link in [*state.get("links", []), *([state["bridge"]] if state.get("bridge") else [])]:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            _run(["ip", "link", "del", link])


def _cleanup_state(state: dict[str, Any]) -> None:
    for entry in state.get("pids", []):
        kill_pid(entry["pid"], entry.get("start"))
    remove_network(state)


def sweep(state_dir: Path = STATE_DIR) -> list[str]:
    """Clean up after runs whose harness is gone; returns their run ids."""
    cleaned = []
    if not state_dir.is_dir():
        return cleaned
    for path in sorted(state_dir.glob("*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = None
        if state is not None and same_process(state.get("harness_pid", -1),
                                              state.get("harness_start")):
            continue  # a live run
        if state is not None:
            log.warning("cleaning up after crashed run %s (harness pid %s)",
                        state.get("run_id"), state.get("harness_pid"))
            _cleanup_state(state)
            cleaned.append(str(state.get("run_id")))
        with contextlib.suppress(OSError):
            path.unlink()
    return cleaned


class RunState:
    """The state file of the live run; ``cleanup()`` removes everything it lists."""

    def __init__(self, run_id: str, state_dir: Path = STATE_DIR) -> None:
        self.run_id = run_id
        self.path = state_dir / f"{run_id}.json"
        state_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.data: dict[str, Any] = {
            "run_id": run_id, "harness_pid": os.getpid(),
            "harness_start": process_start_time(os.getpid()),
            "pids": [], "netns": [], "links": [], "bridge": None,
        }
        self._cleaned = False
        self._save()

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        os.replace(tmp, self.path)

    def add_pid(self, pid: int) -> None:
        with self._lock:
            self.data["pids"].append({"pid": pid, "start": process_start_time(pid)})
            self._save()

    def remove_pid(self, pid: int) -> None:
        with self._lock:
            self.data["pids"] = [e for e in self.data["pids"] if e["pid"] != pid]
            self._save()

    def add(self, key: str, name: str) -> None:
        """Record a namespace (``netns``) or link (``links``) before creating it."""
        with self._lock:
            if name not in self.data[key]:
                self.data[key].append(name)
                self._save()

    def set_bridge(self, name: str | None) -> None:
        with self._lock:
            self.data["bridge"] = name
            self._save()

    def cleanup(self) -> None:
        with self._lock:
            if self._cleaned:
                return
            self._cleaned = True
            _cleanup_state(self.data)
            with contextlib.suppress(OSError):
                self.path.unlink()

    def install_handlers(self) -> None:
        """atexit and SIGTERM/SIGINT/SIGHUP: clean up, then die of the signal."""
        atexit.register(self.cleanup)
        if threading.current_thread() is not threading.main_thread():
            return

        def on_signal(signum, frame):
            self.cleanup()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
