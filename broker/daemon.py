"""Detaching the server from the terminal, and its pid file (``josef server --daemon``).

``daemonize`` is the classic double fork that ``kafka-server-start.sh -daemon`` gets from
``nohup ... &``, done properly: fork, ``setsid`` in the child (new session, no controlling
terminal), fork again so the daemon can never reacquire one, then in the grandchild stdin
reads ``/dev/null`` and stdout/stderr append to the log file. The working directory is kept
(relative ``log.dirs`` keep meaning what they meant at the prompt).

Unlike ``-daemon``, the original process does not return at once: it waits on a pipe until
the broker has finished startup (registered, request processing enabled), checks that every
listener accepts a TCP connection, and only then prints the pid and exits 0. If the broker
fails first, it prints the broker's last error and exits 1; if startup takes longer than
``wait_s`` it says so and exits 1 (the broker keeps starting).

Pipe protocol (daemon -> original process), one ASCII line each: ``pid <n>`` once the pid
file is written, then ``ready <broker id> <listener://host:port> ...`` or
``error <message>``; end of file without either means the daemon died.

Pid file: the decimal pid and a newline, written atomically (temp file + rename); removed at
exit only by the process whose pid it holds.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import sys
import time

__all__ = ["StartupPipe", "check_writable_file", "daemonize", "running_pid",
           "write_pid_file", "remove_pid_file"]

DEFAULT_WAIT_S = 120.0


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


def check_writable_file(path: str) -> None:
    """Create ``path``'s directory and open ``path`` for appending (created if missing), so an
    unwritable location fails here with ``OSError`` instead of later in a logging handler."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", encoding="utf-8"):
        pass


def _short(e: OSError) -> str:
    return e.strerror or str(e)


class StartupPipe:
    """The daemon's end of the pipe to the waiting ``josef server --daemon``; also remembers
    the last ERROR logged (:meth:`watch_errors`) so that :meth:`finish` can send it."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self.last_error: str | None = None

    def _send(self, line: str) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, (" ".join(line.split()) + "\n").encode("ascii", "replace"))
        except OSError:  # the waiting process is gone (Ctrl-C): carry on without it
            self._close()

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def watch_errors(self, logger: logging.Logger | None = None) -> None:
        """Record the last ERROR-or-worse message logged to ``logger`` (default: root)."""
        pipe = self

        class _LastError(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                try:
                    text = record.getMessage().splitlines()[0] if record.msg else ""
                    if record.exc_info and record.exc_info[1] is not None:
                        e = record.exc_info[1]
                        text = f"{text}: {type(e).__name__}: {e}" if text else repr(e)
                    pipe.last_error = text
                except Exception:  # noqa: BLE001 - never break logging
                    pass

        (logger or logging.getLogger()).addHandler(_LastError(logging.ERROR))

    def ready(self, broker_id: int, endpoints: list[str]) -> None:
        """Startup finished: tell the waiting process and let it go."""
        self._send(f"ready {broker_id} {' '.join(endpoints)}")
        self._close()

    def finish(self, exit_code: object) -> None:
        """The server returned without :meth:`ready` (a failed startup): send the last error."""
        if self.fd is not None:
            self._send(f"error {self.last_error or f'the broker exited with status {exit_code}'}")
            self._close()


def daemonize(log_file: str, pid_file: str | None = None,
              wait_s: float = DEFAULT_WAIT_S) -> StartupPipe | int:
    """Detach. Returns the daemon's :class:`StartupPipe` in the daemon, and the exit code
    for the command (0 started, 1 failed or still starting after ``wait_s``) in the original
    process, after printing one line about the outcome.

    Raises ``OSError`` (before forking) when ``log_file`` cannot be written.
    """
    log_file = os.path.abspath(log_file)
    check_writable_file(log_file)
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    first = os.fork()
    if first > 0:  # the original process
        os.close(write_fd)
        try:
            return _wait_for_daemon(read_fd, log_file, wait_s)
        finally:
            os.close(read_fd)
            os.waitpid(first, 0)
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
    pipe = StartupPipe(write_fd)
    if pid_file:
        try:
            write_pid_file(pid_file)
        except OSError as e:
            pipe._send(f"error cannot write the pid file {pid_file}: {_short(e)}")
            os._exit(1)
    pipe._send(f"pid {os.getpid()}")
    return pipe


def _wait_for_daemon(fd: int, log_file: str, wait_s: float) -> int:
    deadline = time.monotonic() + wait_s
    buf = b""
    pid = None
    while True:
        remaining = deadline - time.monotonic()
        ready = select.select([fd], [], [], remaining)[0] if remaining > 0 else []
        if not ready:
            print(f"josef: the broker{f' (pid {pid})' if pid else ''} has not finished "
                  f"starting after {wait_s:g} s; it keeps starting in the background, see "
                  f"{log_file}", file=sys.stderr)
            return 1
        data = os.read(fd, 4096)
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            kind, _, rest = line.decode("ascii", "replace").partition(" ")
            if kind == "pid":
                pid = rest.strip()
            elif kind == "ready":
                broker_id, *endpoints = rest.split()
                return _check_accepting(pid, broker_id, endpoints, log_file)
            elif kind == "error":
                print(f"josef: the broker failed to start: {rest.strip()} (log {log_file})",
                      file=sys.stderr)
                return 1
        if not data:  # end of file: the daemon died without a word
            print(f"josef: the broker{f' (pid {pid})' if pid else ''} exited during startup: "
                  f"{last_error_in(log_file) or 'no error logged'} (log {log_file})",
                  file=sys.stderr)
            return 1


def _check_accepting(pid, broker_id: str, endpoints: list[str], log_file: str) -> int:
    for ep in endpoints:
        host, _, port = ep.split("://", 1)[-1].rpartition(":")
        host = host.strip("[]")
        host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as e:
            print(f"josef: broker {broker_id} (pid {pid}) started but {ep} does not accept "
                  f"connections: {_short(e)} (log {log_file})", file=sys.stderr)
            return 1
    print(f"josef: broker {broker_id} started in the background (pid {pid}), accepting "
          f"connections on {', '.join(endpoints)}; log {log_file}")
    return 0


def last_error_in(log_file: str, tail_bytes: int = 65536) -> str | None:
    """The last ERROR (or traceback's final) line in the tail of ``log_file``."""
    try:
        with open(log_file, "rb") as f:
            f.seek(max(0, os.path.getsize(log_file) - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if " ERROR " in line or " FATAL " in line or (
                line and not line[0].isspace() and line.split(":", 1)[0].endswith(
                    ("Error", "Exception"))):
            return line.strip()
    return None
