"""controller/zk_handler.py: kazoo's select with poll(2) answers as kazoo's own does."""

from __future__ import annotations

import socket
import time

import pytest
from kazoo.handlers.threading import SequentialThreadingHandler

from controller.zk_handler import PollThreadingHandler


def test_poll_select_agrees_with_kazoos_select():
    a, b = socket.socketpair()
    try:
        for handler in (SequentialThreadingHandler(), PollThreadingHandler()):
            assert handler.select([a], [b], [], 0) == ([], [b], [])  # nothing to read yet
            b.send(b"x")
            assert handler.select([a], [], [], 1.0) == ([a], [], [])
            a.recv(1)
            t = time.monotonic()
            assert handler.select([a], [], [], 0.05) == ([], [], [])  # the timeout, seconds
            assert time.monotonic() - t >= 0.04
            closed = socket.socket()
            closed.close()
            with pytest.raises(TypeError):  # kazoo: "Invalid file descriptor"
                handler.select([closed], [], [], 0)  # a closed socket (fileno -1)
    finally:
        a.close()
        b.close()
