"""Progress bars for long tool operations, drawn by ``tqdm`` on stderr.

Shown only when stderr is a terminal, or when forced (``force=True``, the tools'
``--progress`` flag, or ``JOSEF_PROGRESS=1``); otherwise every call is a no-op, so piping a
tool's output never mixes in control characters. Tools that print data on stdout
(console-consumer, dump-log) pass ``quiet_when_stdout_is_tty=True``: the bar then appears on
its own only when stdout goes to a file or a pipe, so it never interleaves with the records.
``JOSEF_PROGRESS=0`` turns every bar off.

Units: ``unit="B"`` counts bytes (shown in KiB/MiB/GiB steps, written ``kB``/``MB``/``GB``
as tqdm does, with percent and rate); ``unit="records"`` counts records (exact counts, the
rate scaled: ``12.3k records/s``). :meth:`ProgressBar.set_postfix` appends a note such as ``lag 42`` to the line.
The final line (drawn on :meth:`ProgressBar.close`) stays on the terminal.

:func:`static_bar` renders the same kind of line once, for reports (``reassign-partitions
--verify`` prints one per partition on stdout).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from tqdm import tqdm

__all__ = ["ProgressBar", "static_bar", "human_bytes"]

_BYTES_FORMAT = ("{desc}: {percentage:5.1f}%|{bar}| {n_fmt}B/{total_fmt}B "
                 "[{elapsed}, {rate_fmt}{postfix}]")
_BYTES_NO_TOTAL = "{desc}: {n_fmt}B [{elapsed}, {rate_fmt}{postfix}]"
_RECORDS_FORMAT = ("{desc}: {percentage:5.1f}%|{bar}| {n}/{total} records "
                   "[{elapsed}, {rate_fmt}{postfix}]")
_RECORDS_NO_TOTAL = "{desc}: {n} records [{elapsed}, {rate_fmt}{postfix}]"


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.50KB`` (tqdm's 1024-based scale, as the bars show sizes)."""
    return f"{n:.0f}B" if abs(n) < 1000 else tqdm.format_sizeof(n, divisor=1024) + "B"


def _enabled(stream: TextIO, force: bool | None, quiet_when_stdout_is_tty: bool) -> bool:
    env = os.environ.get("JOSEF_PROGRESS", "")
    if force is not None:
        return force
    if env:
        return env != "0"
    if quiet_when_stdout_is_tty and getattr(sys.stdout, "isatty", lambda: False)():
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class ProgressBar:
    """``with ProgressBar(total_bytes, "producing") as bar: bar.update(n)``.

    ``total`` None or 0 draws a counter without percent; ``unit`` is ``"B"`` or
    ``"records"``."""

    def __init__(self, total: int | None, label: str = "", *, unit: str = "B",
                 stream: TextIO | None = None, force: bool | None = None,
                 quiet_when_stdout_is_tty: bool = False, interval_s: float = 0.1) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _enabled(self.stream, force, quiet_when_stdout_is_tty)
        self.total = total if total and total > 0 else None
        self.done = 0
        self._formats = (_BYTES_FORMAT, _BYTES_NO_TOTAL) if unit == "B" else (
            _RECORDS_FORMAT, _RECORDS_NO_TOTAL)
        self._bar: tqdm | None = None
        if not self.enabled:
            return
        isatty = bool(getattr(self.stream, "isatty", lambda: False)())
        if unit == "B":
            scale = {"unit": "B", "unit_scale": True, "unit_divisor": 1024}
        else:
            scale = {"unit": f" {unit}", "unit_scale": True}  # exact counts, scaled rate
        self._bar = tqdm(total=self.total, desc=label, file=self.stream, leave=True,
                         mininterval=interval_s, bar_format=self._formats[not self.total],
                         dynamic_ncols=isatty, **scale)

    def set_total(self, total: int | None) -> None:
        """Set (or drop, with None/0) the total once it is known."""
        self.total = total if total and total > 0 else None
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.bar_format = self._formats[not self.total]
            self._bar.refresh()

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def set_postfix(self, text: str) -> None:
        """A note after the rate, e.g. ``lag 42`` (redrawn with the next update)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self.enabled = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def static_bar(label: str, done: int, total: int, width: int = 20) -> str:
    """One bar line for ``done`` of ``total`` bytes, e.g.
    ``t-0:  41.7%|########            | 5.00MB/12.0MB`` (ASCII; nothing to copy is 100%)."""
    frac = 1.0 if total <= 0 else min(max(done, 0) / total, 1.0)
    filled = int(frac * width)
    return (f"{label}: {frac * 100:5.1f}%|{'#' * filled}{' ' * (width - filled)}| "
            f"{human_bytes(max(done, 0))}/{human_bytes(max(total, 0))}")
