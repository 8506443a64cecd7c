"""Log dirs at broker startup: creating and locking them, agreeing on `meta.properties`.

- `lock_log_dirs(dirs)`: create each dir and take ``fcntl.flock`` on ``<dir>/.lock`` (held
  until the process exits; a second broker on the same dir fails with Kafka's message). A
  dir that cannot be created or written starts offline (KIP-112: the broker serves the
  others); FatalStartupError only when none can be used.
- `read_broker_metadata(dirs)`: the ``broker.id`` and ``cluster.id`` stored in the dirs'
  ``meta.properties`` (Kafka's BrokerMetadataCheckpoint checks): FatalStartupError when
  they differ between dirs or cannot be read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from protocol.errors import KafkaError
from storage.checkpoints import CheckpointError, read_meta_properties

__all__ = ["DirLock", "FatalStartupError", "LOCK_FILE", "describe_error", "lock_log_dirs",
           "read_broker_metadata"]

LOCK_FILE = ".lock"


class FatalStartupError(Exception):
    """Startup cannot go on; the message says why and what to do (logged without a trace)."""


def describe_error(e: BaseException) -> str:
    if isinstance(e, KafkaError):
        return f"{e.code.name}: {e.message}" if e.message else e.code.name
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}{f' ({e.filename})' if e.filename else ''}"
    return str(e) or type(e).__name__


class DirLock:
    """``fcntl.flock`` on ``<dir>/.lock`` (released on close or process exit)."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, LOCK_FILE)
        self.fd = -1

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise FatalStartupError(
                f"Failed to acquire lock on file {LOCK_FILE} in {os.path.dirname(self.path)}. "
                "A Kafka instance in another process or thread is using this directory."
            ) from None
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def lock_log_dirs(log_dirs: list[str]) -> tuple[list[DirLock], dict[str, str]]:
    """``(locks held, {dir: why it starts offline})``; see the module docstring."""
    locks: list[DirLock] = []
    offline: dict[str, str] = {}
    for d in log_dirs:
        try:
            os.makedirs(d, exist_ok=True)
            if not os.access(d, os.W_OK | os.X_OK):
                raise PermissionError(f"{d} is not writable")
        except OSError as e:
            offline[d] = f"cannot be created or is not writable: {describe_error(e)}"
            continue
        lock = DirLock(d)
        try:
            lock.acquire()
        except OSError as e:
            for held in locks:
                held.release()
            raise FatalStartupError(f"Cannot lock log directory {d}: {describe_error(e)}") \
                from None
        locks.append(lock)
    if len(offline) == len(log_dirs):
        raise FatalStartupError(
            "none of the specified log dirs from " + ", ".join(log_dirs)
            + " can be created or validated: "
            + "; ".join(f"{d} {why}" for d, why in offline.items()))
    return locks, offline


def read_broker_metadata(log_dirs: list[str]) -> tuple[int | None, str | None]:
    """``(stored broker.id, stored cluster.id)``, None where no dir stores one."""
    broker_ids: dict[str, str] = {}
    cluster_ids: dict[str, str] = {}
    for d in log_dirs:
        try:
            props = read_meta_properties(d)
        except (CheckpointError, OSError, UnicodeDecodeError) as e:
            raise FatalStartupError(f"Corrupt meta.properties in {d}: {describe_error(e)}") \
                from None
        if props is None:
            continue
        bid = props.get("broker.id", props.get("node.id"))
        if bid is not None:
            broker_ids[d] = bid
        if props.get("cluster.id"):
            cluster_ids[d] = props["cluster.id"]
    if len(set(broker_ids.values())) > 1:
        raise FatalStartupError(
            "BrokerMetadata is not consistent across log.dirs: broker.id differs "
            + ", ".join(f"{d}: {b}" for d, b in broker_ids.items()))
    if len(set(cluster_ids.values())) > 1:
        raise FatalStartupError(
            "BrokerMetadata is not consistent across log.dirs: cluster.id differs "
            + ", ".join(f"{d}: {c}" for d, c in cluster_ids.items()))
    stored: int | None = None
    if broker_ids:
        raw = next(iter(broker_ids.values()))
        try:
            stored = int(raw)
        except ValueError:
            raise FatalStartupError(
                f"Corrupt meta.properties: broker.id={raw!r} is not an integer") from None
    return stored, next(iter(cluster_ids.values()), None)
