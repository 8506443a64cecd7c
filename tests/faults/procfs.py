"""Process facts from /proc (Linux): resident memory now and at its peak."""

from __future__ import annotations

import os


def _status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(field.encode() + b":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes(pid: int) -> int | None:
    """Resident set size of ``pid`` in bytes (VmRSS), None if it is gone."""
    kib = _status_kib(pid, "VmRSS")
    return None if kib is None else kib * 1024


def peak_rss_bytes(pid: int) -> int | None:
    """Highest resident set size of ``pid`` so far in bytes (VmHWM), None if it is gone."""
    kib = _status_kib(pid, "VmHWM")
    return None if kib is None else kib * 1024


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (writes 5 to /proc/PID/clear_refs; Linux >= 4.0)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3.. of /proc/PID/stat (after the command name, which may hold spaces and
    parentheses), or None if ``pid`` is gone; ``[0]`` is the state, ``[19]`` the start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of ``pid`` so far, in seconds."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
