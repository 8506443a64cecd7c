"""Detaching the server from the terminal, and its pid file (``josef server --daemon``).

``daemonize`` is the classic double fork that ``kafka-server-start.sh -daemon`` gets from
``nohup ... &``, done properly: fork, ``setsid`` in the child (new session, no controlling
terminal), fork again so the daemon can never reacquire one, then in the grandchild stdin
reads ``/dev/null`` and stdout/stderr append to the log file. The working directory is kept
(relative ``log.dirs`` keep meaning what they meant at the prompt). The original process
waits (at most 10 s) until the daemon has written its pid file, prints the pid, and returns.

Pid file: the decimal pid and a newline, written atomically (temp file + rename); removed at
exit only by the process whose pid it holds.
"""

from __future__ import annotations

import os
import select
import sys
import time

__all__ = ["daemonize", "running_pid", "write_pid_file", "remove_pid_file"]

_NOTIFY_TIMEOUT_S = 10.0


def running_pid(pid_file: str) -> int | None:
    """The pid recorded in ``pid_file`` if that process is alive, else ``None``."""
    try:
        with open(pid_file, encoding="ascii") as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    if pid <= 0 or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def write_pid_file(pid_file: str, pid: int | None = None) -> None:
    """Atomically write ``pid`` (default: this process) to ``pid_file``."""
    pid = os.getpid() if pid is None else pid
    directory = os.path.dirname(os.path.abspath(pid_file))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{pid_file}.{pid}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{pid}\n")
    os.replace(tmp, pid_file)


def remove_pid_file(pid_file: str) -> None:
    """Remove ``pid_file`` if it still names this process."""
    try:
        with open(pid_file, encoding="ascii") as f:
            if int(f.read().strip()) != os.getpid():
                return
        os.unlink(pid_file)
    except (OSError, ValueError):
        pass


def daemonize(log_file: str, pid_file: str | None = None) -> bool:
    """Detach. Returns ``True`` in the daemon and ``False`` in the original process.

    The daemon writes ``pid_file`` (if given) before the original process returns, so a
    caller that sees the command finish can rely on the pid file.
    """
    log_file = os.path.abspath(log_file)
    os.makedirs(os.path.dirname(log_file), exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    first = os.fork()
    if first > 0:  # the original process
        os.close(write_fd)
        pid_text = _read_notification(read_fd)
        os.close(read_fd)
        os.waitpid(first, 0)
        if pid_text:
            print(f"josef: server started in the background, pid {pid_text}, "
                  f"log {log_file}")
        else:
            print(f"josef: the background server did not report in; see {log_file}",
                  file=sys.stderr)
        return False
    # first child: new session, then fork again and leave
    os.close(read_fd)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    # the daemon
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    out = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    if pid_file:
        write_pid_file(pid_file)
    os.write(write_fd, str(os.getpid()).encode("ascii"))
    os.close(write_fd)
    return True


def _read_notification(fd: int) -> str:
    deadline = time.monotonic() + _NOTIFY_TIMEOUT_S
    chunks = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            break
        data = os.read(fd, 64)
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode("ascii", "replace").strip()
