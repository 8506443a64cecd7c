"""Raw protocol requests for integration tests: one blocking socket speaking the Kafka
protocol through the project's codec, for wire-level answers stock clients do not show
(exact error codes, version differences, parked fetches).

Frames: int32 size | request header (v1/v2 by ``encode_request_header``) | body; responses
are read back in order and their correlation id is checked. ``recv_exact`` comes from the
harness (which stays codec-free on purpose).
"""

from __future__ import annotations

import select
import socket
import struct

from client.connection import decode_response_frame, encode_request_frame
from protocol import api
from tests.integration.harness import recv_exact

__all__ = ["RawClient"]


class RawClient:
    """One connection to ``broker`` (anything with ``host`` and ``port``); ``timeout`` in
    seconds bounds every socket operation. ``send`` and ``recv`` are split so a test can park
    a request and watch the socket (``readable_within``) while acting elsewhere. Frames are
    built and read by :mod:`client.connection` (the project's one protocol client), at the
    exact version the test asks for."""

    def __init__(self, broker, timeout: float = 10.0, client_id: str = "raw-test") -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=timeout)
        self.client_id = client_id
        self.cid = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, key: int, version: int, msg) -> int:
        """Send one request; returns its correlation id."""
        self.cid += 1
        self.sock.sendall(encode_request_frame(key, version, self.cid, self.client_id, msg))
        return self.cid

    def readable_within(self, seconds: float) -> bool:
        return bool(select.select([self.sock], [], [], seconds)[0])

    def recv(self, key: int, version: int, cid: int):
        """Read the next response (which must carry ``cid``) and decode it."""
        size = struct.unpack(">i", recv_exact(self.sock, 4))[0]
        frame = recv_exact(self.sock, size)
        got, msg = decode_response_frame(key, version, frame)
        assert got == cid
        return msg

    def call(self, key: int, version: int, msg=None, /, **fields):
        """One round trip; the request is ``msg`` or, without it, built from ``fields``."""
        if msg is None:
            msg = api.API_KEYS[key].request_cls(**fields)
        return self.recv(key, version, self.send(key, version, msg))
