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

from protocol import api
from protocol.headers import RequestHeader, encode_request_header, response_header_version
from tests.integration.harness import recv_exact

__all__ = ["RawClient"]


class RawClient:
    """One connection to ``broker`` (anything with ``host`` and ``port``); ``timeout`` in
    seconds bounds every socket operation. ``send`` and ``recv`` are split so a test can park
    a request and watch the socket (``readable_within``) while acting elsewhere."""

    def __init__(self, broker, timeout: float = 10.0, client_id: str = "raw-test") -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=timeout)
        self.client_id = client_id
        self.cid = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, key: int, version: int, msg) -> int:
        """Send one request; returns its correlation id."""
        self.cid += 1
        head = encode_request_header(RequestHeader(key, version, self.cid, self.client_id))
        body = head + api.encode_request(msg, version)
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        return self.cid

    def readable_within(self, seconds: float) -> bool:
        return bool(select.select([self.sock], [], [], seconds)[0])

    def recv(self, key: int, version: int, cid: int):
        """Read the next response (which must carry ``cid``) and decode it."""
        size = struct.unpack(">i", recv_exact(self.sock, 4))[0]
        frame = recv_exact(self.sock, size)
        assert struct.unpack_from(">i", frame)[0] == cid
        offset = 4 + (1 if response_header_version(key, version) >= 1 else 0)
        return api.decode_response(key, version, frame, offset)

    def call(self, key: int, version: int, msg=None, /, **fields):
        """One round trip; the request is ``msg`` or, without it, built from ``fields``."""
        if msg is None:
            msg = api.API_KEYS[key].request_cls(**fields)
        return self.recv(key, version, self.send(key, version, msg))
