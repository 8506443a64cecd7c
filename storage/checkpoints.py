"""Checkpoint files, `meta.properties` and the clean-shutdown marker, in Kafka's formats.

Checkpoint text format (Kafka's CheckpointFile, version 0)::

    0                 <- version line
    2                 <- number of entries
    topic 0 1234      <- offset checkpoints: "topic partition offset"
    topic 1 99
                         leader-epoch-checkpoint entries are "epoch startOffset"

Files: per log dir `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint`; per partition dir `leader-epoch-checkpoint`.
Writes are atomic: write `<name>.tmp`, fsync it, rename over `<name>`, fsync the directory.
A malformed file raises `CheckpointError` (Kafka raises on a corrupt checkpoint too).
These functions do blocking I/O: call them from an executor when on the event loop.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from operator import attrgetter, itemgetter

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"

CHECKPOINT_VERSION = 0


class CheckpointError(Exception):
    """A checkpoint or meta.properties file is malformed (path and line in the message)."""


def fsync_dir(path: str) -> None:
    """fsync a directory so a rename/create/delete inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: str) -> None:
    """Make everything written to the file system holding `path` durable: Linux's
    syncfs(2) (one call instead of an fsync per file: a clean shutdown of 100,000
    partitions writes several files each), else os.sync()."""
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        syncfs = libc.syncfs
    except (OSError, AttributeError):
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, sync: bool = True) -> None:
    """Replace `path` by `data`: tmp file + fsync + rename + directory fsync."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):  # no stale temp file (a full disk, say)
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def _format(entries: list[str]) -> bytes:
    return ("\n".join([str(CHECKPOINT_VERSION), str(len(entries)), *entries]) + "\n").encode()


def _parse(path: str, fields: int) -> list[list[str]]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not text: {e}") from e
    if len(lines) < 2:
        raise CheckpointError(f"{path}: missing version or count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"{path}: unrecognised version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}: bad count line {lines[1]!r}") from None
    body = [ln for ln in lines[2:] if ln.strip()]
    if count != len(body):
        raise CheckpointError(f"{path}: expected {count} entries, found {len(body)}")
    out = [ln.split() for ln in body]
    if any(len(parts) != fields for parts in out):  # name the first bad line
        i = next(i for i, parts in enumerate(out) if len(parts) != fields)
        raise CheckpointError(f"{path}:{i + 3}: expected {fields} fields: {body[i]!r}")
    return out


def gather_offsets(items: list[tuple[tuple[str, int], object]], attribute: str,
                   live_dirs: list[str], dir_of: Mapping | None = None
                   ) -> dict[str, dict[tuple[str, int], int]]:
    """``{dir: {(topic, partition): offset}}`` of the logs ``items`` (``(tp, log)``), the
    offset being each log's `attribute`, for each of `live_dirs`; `dir_of` maps a
    partition to its dir, None when one dir holds every log (then C-level loops: 100,000
    logs every 5 s)."""
    value = attrgetter(attribute)
    if dir_of is None:
        return {d: dict(zip(map(itemgetter(0), items), map(value, map(itemgetter(1), items)),
                            strict=True)) for d in live_dirs}
    per_dir: dict[str, dict] = {d: {} for d in live_dirs}
    for tp, log in items:
        entries = per_dir.get(dir_of.get(tp))
        if entries is not None:
            entries[tp] = value(log)
    return per_dir


class OffsetCheckpointFile:
    """`topic partition offset` checkpoint (recovery point, log start, replication offsets)."""

    def __init__(self, path: str):
        self.path = path

    def write(self, offsets: dict[tuple[str, int], int], sync: bool = True) -> None:
        lines = [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        write_atomic(self.path, _format(lines), sync)

    def read(self) -> dict[tuple[str, int], int]:
        """Missing file -> {}. Malformed -> CheckpointError."""
        rows = _parse(self.path, 3)
        try:  # 100,000 partitions: one comprehension, the bad entry found only on error
            return {(topic, int(part)): int(off) for topic, part, off in rows}
        except ValueError:
            for topic, part, off in rows:
                try:
                    int(part), int(off)
                except ValueError:
                    raise CheckpointError(
                        f"{self.path}: bad entry {topic} {part} {off}") from None
            raise


class LeaderEpochCheckpointFile:
    """Per-partition `leader-epoch-checkpoint`: `epoch startOffset` lines, in epoch order."""

    def __init__(self, path: str):
        self.path = path

    def write(self, entries: Iterable[tuple[int, int]], sync: bool = True) -> None:
        write_atomic(self.path, _format([f"{e} {o}" for e, o in entries]), sync)

    def read(self) -> list[tuple[int, int]]:
        try:
            return [(int(e), int(o)) for e, o in _parse(self.path, 2)]
        except ValueError:
            raise CheckpointError(f"{self.path}: bad entry") from None


def write_meta_properties(log_dir: str, broker_id: int, cluster_id: str | None,
                          version: int = 0) -> None:
    """Write `meta.properties` as Kafka's ZooKeeper-mode broker does (version=0,
    broker.id, cluster.id; version=1 with node.id is KRaft's form)."""
    lines = ["#", "#Josef", f"version={version}"]
    if version == 0:
        lines.append(f"broker.id={broker_id}")
    else:
        lines.append(f"node.id={broker_id}")
    if cluster_id is not None:
        lines.append(f"cluster.id={cluster_id}")
    write_atomic(os.path.join(log_dir, META_PROPERTIES), ("\n".join(lines) + "\n").encode())


def read_meta_properties(log_dir: str) -> dict[str, str] | None:
    """Parse `meta.properties` (Java properties subset: key=value, # comments);
    None when absent."""
    path = os.path.join(log_dir, META_PROPERTIES)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    props = {}
    for ln in text.splitlines():
        ln = ln.strip()
        if not ln or ln[0] in "#!":
            continue
        if "=" not in ln:
            raise CheckpointError(f"{path}: bad line {ln!r}")
        k, v = ln.split("=", 1)
        props[k.strip()] = v.strip()
    return props
