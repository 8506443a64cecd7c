"""The recorded history of a fault run: one JSON object per line in ``DIR/history.jsonl``.

Every event has ``t`` (seconds since the run started, float) and ``type``:

==========  ===================================================================================
invoke      a producer ``process`` sends ``value`` (unique in the run) to ``partition``
ok          ``value`` acknowledged at ``partition``/``offset`` (acks=all)
fail        ``value`` definitely not written (``error``); a write may still have happened for
            ``info``: the outcome is unknown (timeouts, lost connections, a fatal producer)
assign      consumer ``member`` was assigned ``partitions`` (a new session for each)
revoke      ``member`` lost ``partitions``
poll        ``member`` read ``value`` at ``partition``/``offset``
commit      ``member`` committed ``offset`` (the next offset to read) for ``partition``
nemesis     a fault: ``kind`` (kill, pause, partition, zk, torn, ...), ``phase`` start/end,
            ``detail``
final       the read after healing: ``value`` at ``partition``/``offset``
final_end   the final read of ``partition`` covered ``log_start`` .. ``high_watermark``
client_error  an error a client reported (``process``, ``error``); informational
==========  ===================================================================================

``History`` appends events from many threads (one lock, line-buffered file) and keeps them in
memory for the checker.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any


class History:
    """Thread-safe event recorder; ``path`` None keeps events in memory only."""

    def __init__(self, path: Path | None = None, clock=time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._t0 = clock()
        self.events: list[dict[str, Any]] = []
        self._file = open(path, "a", buffering=1) if path is not None else None

    def now(self) -> float:
        return round(self._clock() - self._t0, 6)

    def add(self, type_: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            event = {"t": self.now(), "type": type_, **fields}
            self.events.append(event)
            if self._file is not None:
                self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        return event

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def load(path: Path) -> list[dict[str, Any]]:
    """Events of a history file (a torn last line, from a crashed harness, is skipped)."""
    events = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events
