"""Bad input on raw sockets while a well-behaved client keeps producing: garbage, truncated
frames, oversize and negative sizes, frames too short for a header, unknown API keys,
unsupported versions, malformed bodies. The broker closes the offending connection (or, for
ApiVersions, answers UNSUPPORTED_VERSION), the producer sees no error, the broker stays up.
Idle connections are closed after ``connections.max.idle.ms``."""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

import pytest

from protocol import api
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader, encode_request_header
from tests.integration.harness import BrokerProcess, api_versions_probe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

MAX_REQUEST = 1024 * 1024  # socket.request.max.bytes for these brokers


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _header(api_key: int, version: int, correlation_id: int = 1) -> bytes:
    """Request header v1 (int16 key, int16 version, int32 correlation id, string client id):
    readable for any key/version, which is what the broker peeks first."""
    return struct.pack(">hhih", api_key, version, correlation_id, 4) + b"evil"


def _closed_by_broker(s: socket.socket, timeout: float = 10.0) -> bool:
    """True when the broker closes the connection (EOF or reset) within ``timeout`` s;
    any response bytes before that are drained."""
    s.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def _attack(broker: BrokerProcess, data: bytes) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=10)
    try:
        s.sendall(data)
    except (ConnectionResetError, BrokenPipeError):
        pass
    return s


# Each case: name, bytes sent, whether the broker must close the connection by itself.
def _cases() -> list[tuple[str, bytes, bool]]:
    rng = random.Random(1234)
    metadata_v9 = api.encode_request(api.API_KEYS[3].request_cls(topics=None), 9)
    good_metadata_header = encode_request_header(RequestHeader(3, 9, 5, "evil"))
    return [
        ("oversize size", struct.pack(">i", MAX_REQUEST + 1) + b"\x00" * 64, True),
        ("huge size", struct.pack(">i", 2**31 - 1), True),
        ("negative size", struct.pack(">i", -1) + b"\x00" * 16, True),
        ("frame shorter than a header", _frame(b"\x00\x03\x00"), True),
        ("empty frame", _frame(b""), True),
        ("unknown api key", _frame(_header(999, 0)), True),
        ("negative api key", _frame(_header(-7, 0)), True),
        ("unsupported metadata version", _frame(_header(3, 99) + b"\x00" * 8), True),
        ("metadata body garbage", _frame(good_metadata_header + b"\xff" * 7), True),
        ("truncated metadata body", _frame(good_metadata_header + metadata_v9[:1]), True),
        ("produce body garbage", _frame(_header(0, 3) + bytes(rng.randrange(256)
                                                            for _ in range(200))), True),
        ("garbage after a good request",
         _frame(_header(18, 0)) + b"\xde\xad\xbe\xef" * 16, True),
        ("truncated frame", struct.pack(">i", 100) + b"\x00\x03\x00\x09", False),
        ("random bytes", bytes(rng.randrange(256) for _ in range(4096)), False),
        ("random bytes 2", os.urandom(333), False),
    ]


class _Producing(threading.Thread):
    """A kafka-python producer sending records until stopped; records every failure."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop_flag = threading.Event()
        self.sent = 0
        self.errors: list[BaseException] = []

    def run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, request_timeout_ms=10000,
                                 linger_ms=1)
        try:
            while not self.stop_flag.is_set():
                futures = [producer.send(self.topic, b"rec-%d" % (self.sent + i))
                           for i in range(10)]
                for f in futures:
                    try:
                        f.get(timeout=20)
                    except Exception as e:  # noqa: BLE001 - the test reports them
                        self.errors.append(e)
                self.sent += len(futures)
                time.sleep(0.01)
        finally:
            producer.close(timeout=10)


def test_bad_input_while_producing(broker_factory):
    b = broker_factory({"socket.request.max.bytes": str(MAX_REQUEST)})
    producing = _Producing(b.bootstrap, "steady-1")
    producing.start()
    try:
        deadline = time.monotonic() + 20
        while producing.sent < 20 and time.monotonic() < deadline and producing.is_alive():
            time.sleep(0.05)
        assert producing.sent >= 20, producing.errors
        for _round in range(3):
            open_sockets = []
            for name, data, must_close in _cases():
                s = _attack(b, data)
                if must_close:
                    assert _closed_by_broker(s), f"{name}: connection left open"
                    s.close()
                else:
                    open_sockets.append(s)
            # ApiVersions with an unsupported version: answered, not closed
            with socket.create_connection((b.host, b.port), timeout=10) as s:
                s.sendall(_frame(_header(18, 77, correlation_id=99)))
                size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
                body = s.recv(size, socket.MSG_WAITALL)
                assert struct.unpack_from(">ih", body) == (99, ErrorCode.UNSUPPORTED_VERSION)
            for s in open_sockets:  # abandoned half-sent frames
                s.close()
            api_versions_probe(b.host, b.port)
        sent_before = producing.sent
        deadline = time.monotonic() + 20
        while producing.sent < sent_before + 20 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        producing.stop_flag.set()
        producing.join(30)
    assert producing.errors == []
    assert producing.sent >= sent_before + 20
    assert b.is_running()

    from kafka import KafkaConsumer
    consumer = KafkaConsumer("steady-1", bootstrap_servers=b.bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    try:
        values = [m.value for m in consumer]
    finally:
        consumer.close()
    assert values == [b"rec-%d" % i for i in range(producing.sent)]


def test_metadata_client_unaffected_by_garbage(broker_factory):
    """The same attacks while a client only does metadata requests."""
    from kafka import KafkaAdminClient

    b = broker_factory({"socket.request.max.bytes": str(MAX_REQUEST)})
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
    try:
        for name, data, must_close in _cases():
            s = _attack(b, data)
            if must_close:
                assert _closed_by_broker(s), name
            s.close()
            assert isinstance(admin.list_topics(), list)
        assert admin.describe_cluster()["controller_id"] == 0
    finally:
        admin.close()


def test_idle_connections_are_closed(broker_factory):
    b = broker_factory({"connections.max.idle.ms": "300"})
    silent = socket.create_connection((b.host, b.port), timeout=10)
    used = socket.create_connection((b.host, b.port), timeout=10)
    try:
        used.sendall(_frame(_header(18, 0)))
        size = struct.unpack(">i", used.recv(4, socket.MSG_WAITALL))[0]
        assert len(used.recv(size, socket.MSG_WAITALL)) == size
        start = time.monotonic()
        assert _closed_by_broker(silent, timeout=10)
        assert _closed_by_broker(used, timeout=10)
        assert time.monotonic() - start < 8
    finally:
        silent.close()
        used.close()
    api_versions_probe(b.host, b.port)  # new connections still welcome
