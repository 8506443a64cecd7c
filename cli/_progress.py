"""A one-line progress bar on stderr for long tool operations (big files, large segments).

Shown only when the stream is a terminal, or when forced (``force=True``, the tools'
``--progress`` flag, or ``JOSEF_PROGRESS=1``); otherwise every call is a no-op, so piping a
tool's output never mixes in control characters. Redraws at most every ``interval_s``
(0.1 s) and once more on :meth:`close`. Units: ``total`` and ``update`` count whatever the
caller counts (bytes for files); the line shows percent, the amount done and the rate.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

__all__ = ["ProgressBar"]


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


class ProgressBar:
    """``with ProgressBar(total_bytes, "producing") as bar: bar.update(n)``."""

    def __init__(self, total: int | None, label: str = "", *, stream: TextIO | None = None,
                 force: bool | None = None, width: int = 30, interval_s: float = 0.1,
                 clock=time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if force is None:
            force = os.environ.get("JOSEF_PROGRESS", "") not in ("", "0")
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.enabled = bool(force) or bool(isatty())
        self.total = total if total and total > 0 else None
        self.label = label
        self.width = width
        self.interval_s = interval_s
        self.clock = clock
        self.done = 0
        self._start = clock()
        self._last_draw = float("-inf")

    def update(self, n: int) -> None:
        self.done += n
        if self.enabled and self.clock() - self._last_draw >= self.interval_s:
            self._draw()

    def render(self) -> str:
        """The bar's text (without the leading carriage return)."""
        elapsed = max(self.clock() - self._start, 1e-9)
        rate = f"{_human(self.done / elapsed)}/s"
        if self.total:
            frac = min(self.done / self.total, 1.0)
            filled = int(frac * self.width)
            bar = "#" * filled + "-" * (self.width - filled)
            return (f"{self.label} [{bar}] {frac * 100:5.1f}% "
                    f"{_human(self.done)}/{_human(self.total)} {rate}")
        return f"{self.label} {_human(self.done)} {rate}"

    def _draw(self) -> None:
        self._last_draw = self.clock()
        self.stream.write("\r" + self.render())
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
