"""`LogDirFailureChannel`: which log dirs failed, each announced once (Kafka's, KIP-112).

Any I/O error (`OSError`) while reading or writing a log dir's files -- an append, a segment
roll, an index growing into a new page, a flush, a checkpoint, loading at startup -- marks
the dir offline through `maybe_add_offline_log_dir`: the first report logs one ERROR line
naming the dir and the cause and hands the dir to the `listener` (the broker's
`broker.log_dir_failure.LogDirFailureHandler`, which stops serving the dir's partitions and
tells the controller); later reports for the same dir are silent. The dir stays offline
until the broker restarts (Kafka's semantics: an operator replaces the disk and restarts).

Not a disk failure: running out of file descriptors (EMFILE, ENFILE) or memory (ENOMEM) is
a resource limit of this process, not of the dir; such errors answer KAFKA_STORAGE_ERROR for
the one operation (`is_resource_limit`) and leave the dir online.

Thread-safe: flushes and checkpoints report from executor threads; the listener is always
called on the event loop given to `attach` (or at once when none is attached: tools, tests).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
from collections.abc import Callable

from protocol.errors import ErrorCode, KafkaError

__all__ = ["LogDirFailureChannel", "is_resource_limit", "storage_error"]

log = logging.getLogger(__name__)

#: errnos that are this process's limits, not a failing disk
RESOURCE_LIMIT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def is_resource_limit(exc: BaseException) -> bool:
    """True for EMFILE / ENFILE / ENOMEM: the dir is not at fault."""
    return isinstance(exc, OSError) and exc.errno in RESOURCE_LIMIT_ERRNOS


def storage_error(what: str, exc: BaseException) -> KafkaError:
    """The KAFKA_STORAGE_ERROR (56) a request gets for an I/O error in `what`."""
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what}: {detail}")


class LogDirFailureChannel:
    """Offline log dirs (absolute paths) and why. `listener(dir)` runs on the loop once per
    dir that goes offline."""

    def __init__(self) -> None:
        self._offline: dict[str, str] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.listener: Callable[[str], object] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop,
               listener: Callable[[str], object]) -> None:
        """Deliver failures to `listener` on `loop`, those reported before included."""
        self._loop = loop
        self.listener = listener
        for d in self.offline_dirs():
            loop.call_soon_threadsafe(listener, d)

    def is_offline(self, log_dir: str) -> bool:
        return log_dir in self._offline

    def has_offline_dirs(self) -> bool:
        return bool(self._offline)

    def offline_dirs(self) -> list[str]:
        with self._lock:
            return list(self._offline)

    def reason(self, log_dir: str) -> str | None:
        return self._offline.get(log_dir)

    def maybe_add_offline_log_dir(self, log_dir: str, message: str,
                                  exc: BaseException | None = None) -> bool:
        """Mark `log_dir` offline (True) unless it already is (False, nothing logged).
        `message` says what failed; `exc` is the cause."""
        reason = f"{message}: {exc}" if exc is not None else message
        with self._lock:
            if log_dir in self._offline:
                return False
            self._offline[log_dir] = reason
        log.error("Error while accessing log dir %s, marking it offline: %s", log_dir, reason)
        listener, loop = self.listener, self._loop
        if listener is not None:
            if loop is None:
                listener(log_dir)
            else:
                try:
                    loop.call_soon_threadsafe(listener, log_dir)
                except RuntimeError:  # loop closed: the broker is stopping anyway
                    pass
        return True
