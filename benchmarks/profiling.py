"""py-spy around benchmark processes: sample running brokers, summarise the hottest functions.

``PySpy(pids, directory)`` starts one ``py-spy record --format raw`` per process (sampling
`rate` times a second the thread holding the GIL, so the samples are Python work, not
threads waiting; blocking sampling: the process pauses while its stack is read, so profile
in a pass of its own, never during a measured round); ``stop()`` ends them with
SIGINT (py-spy then writes its file) and returns the raw files. ``summarise(files)`` reads
the collapsed stacks (``frame;frame;...;leaf count``, each frame ``function (file:line)``)
and returns the top entries by self samples (the leaf) and by inclusive samples (the
function anywhere on the stack, counted once per stack; asyncio's loop and the entry points,
on every stack, left out), as percentages of all samples.

py-spy comes from PyPI (``pip install py-spy``); without it ``PySpy.available()`` is False.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

__all__ = ["PySpy", "summarise", "markdown_top"]

#: frames every stack shares (the loop, the entry point): left out of the inclusive list
_PLUMBING = ("asyncio/", "threading.py:", "runpy.py:", "broker/__main__.py:", "broker/cli.py:")
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _short(frame: str) -> str:
    """``func (path/to/pkg/mod.py:123)`` -> ``pkg/mod.py:func`` (lines folded together)."""
    m = _FRAME.match(frame.strip())
    if m is None:
        return frame.strip()
    path = m.group("file")
    parts = path.replace("\\", "/").split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else path
    return f"{short}:{m.group('func')}"


class PySpy:
    def __init__(self, pids: dict[str, int], directory: Path, rate: int = 100) -> None:
        self.pids = pids
        self.dir = Path(directory)
        self.rate = rate
        self.procs: dict[str, subprocess.Popen] = {}

    @staticmethod
    def available() -> bool:
        return shutil.which("py-spy") is not None

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        exe = shutil.which("py-spy")
        for name, pid in self.pids.items():
            out = self.dir / f"{name}.txt"
            self.procs[name] = subprocess.Popen(
                [exe, "record", "--pid", str(pid), "--rate", str(self.rate), "--format", "raw",
                 "--gil", "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(self, timeout: float = 60.0) -> dict[str, Path]:
        for p in self.procs.values():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGINT)
        for p in self.procs.values():
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return {name: self.dir / f"{name}.txt" for name in self.procs
                if (self.dir / f"{name}.txt").exists()}


def summarise(files, top: int = 15) -> tuple[int, list[tuple[str, float]], list[tuple[str, float]]]:
    """(samples, [(function, self %)], [(function, inclusive %)]) over the raw files."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for path in files:
        for line in Path(path).read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [_short(f) for f in stack.split(";") if f]
            if not frames:
                continue
            total += n
            own[frames[-1]] += n
            for f in set(frames):
                if not f.startswith(_PLUMBING):
                    incl[f] += n
    if not total:
        return 0, [], []

    def pct(c):
        return [(name, 100.0 * n / total) for name, n in c.most_common(top)]

    return total, pct(own), pct(incl)


def markdown_top(title: str, files, top: int = 15) -> list[str]:
    """A markdown section: the top self and inclusive entries of `files` side by side."""
    total, own, incl = summarise(files, top)
    lines = [f"{title} ({total:,} samples)", "", "| # | self % | function (self) | "
             "incl % | function (inclusive) |", "| ---: | ---: | --- | ---: | --- |"]
    for i in range(max(len(own), len(incl))):
        a = own[i] if i < len(own) else ("", 0.0)
        b = incl[i] if i < len(incl) else ("", 0.0)
        lines.append(f"| {i + 1} | {a[1]:.1f} | `{a[0]}` | {b[1]:.1f} | `{b[0]}` |")
    lines.append("")
    return lines
