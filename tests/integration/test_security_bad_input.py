"""Bad input on secured listeners (issue 15): garbage or truncated SASL exchanges, a TLS
handshake of random bytes, clients that never authenticate, an unknown mechanism, a wrong
password, requests before authentication, oversized pre-authentication frames.

Each case closes only that connection with the error Kafka gives, is logged once with the
peer address, never reaches request handlers (a Produce/Metadata before authentication does
not create its topic), and the broker keeps serving everyone else. SaslHandshake v0 with raw
tokens (old clients) authenticates. KIP-368: a session used past ``connections.max.reauth.ms``
is closed unless the client re-authenticated (raw requests, and the Java client, which
re-authenticates by itself).
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import time

import pytest

from protocol.errors import ErrorCode
from tests.integration.harness import recv_exact
from tests.integration.raw_client import RawClient
from tests.integration.secure_broker import SecureBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3


class _Addr:
    host = "127.0.0.1"

    def __init__(self, port: int) -> None:
        self.port = port


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    b = SecureBroker(tmp_path_factory.mktemp("secure_bad"),
                     {"connections.max.idle.ms": "3000",
                      "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
                      "listener.name.sasl_plaintext.connections.max.reauth.ms": "2000"}
                     ).start()
    yield b
    b.stop()


_OPEN: list = []


@pytest.fixture(autouse=True)
def _close_sockets():
    yield
    while _OPEN:
        _OPEN.pop().close()


def _sasl(b) -> RawClient:
    c = RawClient(_Addr(b.ports["SASL_PLAINTEXT"]), timeout=10)
    _OPEN.append(c.sock)
    return c


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    _OPEN.append(s)
    return s


def _md_request(*names: str, **fields):
    from protocol import api

    cls = api.API_KEYS[METADATA].request_cls
    return cls(topics=[cls.MetadataRequestTopic(name=n) for n in names], **fields)


def _closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True once the peer closed (EOF or reset) within ``timeout``; reads and drops data."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def _failures(b, since: int) -> list[str]:
    lines = [ln for ln in b.log_text().splitlines() if "Failed authentication with /" in ln]
    return lines[since:]


def _count(b) -> int:
    return len(_failures(b, 0))


def _still_serving(b) -> None:
    c = RawClient(_Addr(b.ports["PLAINTEXT"]))
    try:
        resp = c.call(18, 0)  # ApiVersions
        assert resp.error_code == 0
    finally:
        c.close()


def _topic_exists(b, name: str) -> bool:
    c = RawClient(_Addr(b.ports["PLAINTEXT"]))
    try:
        resp = c.call(METADATA, 1, _md_request(name))
        return resp.topics[0].error_code == 0
    finally:
        c.close()


def test_garbage_first_frame_closes_without_reaching_handlers(secure):
    before = _count(secure)
    c = _sasl(secure)
    c.sock.sendall(struct.pack(">i", 6) + b"\x60\x01garb")  # a GSSAPI-looking token
    assert _closed(c.sock)
    lines = _failures(secure, before)
    assert len(lines) == 1 and "GSSAPI is not supported" in lines[0]
    assert "/127.0.0.1 (channelId=" in lines[0]
    _still_serving(secure)


def test_request_before_authentication_is_never_handled(secure):
    c = _sasl(secure)
    c.send(METADATA, 4, _md_request("created-before-auth", allow_auto_topic_creation=True))
    assert _closed(c.sock)
    assert "Unexpected Kafka request of type Metadata during SASL handshake" in \
        secure.log_text()
    time.sleep(0.3)
    assert not _topic_exists(secure, "created-before-auth")


def test_unknown_mechanism(secure):
    c = _sasl(secure)
    resp = c.call(SASL_HANDSHAKE, 1, mechanism="GSSAPI")
    assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert resp.mechanisms == ["PLAIN"]
    assert _closed(c.sock)


def test_wrong_password_gets_sasl_authentication_failed(secure):
    before = _count(secure)
    c = _sasl(secure)
    assert c.call(SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
    resp = c.call(SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00wrong")
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert resp.error_message == "Authentication failed: Invalid username or password"
    assert _closed(c.sock)
    assert len(_failures(secure, before)) == 1


def test_other_request_during_authentication_is_illegal_sasl_state(secure):
    c = _sasl(secure)
    assert c.call(SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
    cid = c.send(METADATA, 1, _md_request("x-illegal"))
    resp = c.recv(METADATA, 1, cid)
    assert resp.topics[0].error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert _closed(c.sock)


def test_truncated_and_garbage_tokens(secure):
    # a SaslAuthenticate whose body is cut short, then silence: closed at once
    c = _sasl(secure)
    assert c.call(SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
    frame = struct.pack(">hhi", SASL_AUTHENTICATE, 1, 9) + b"\x00\x04ab"
    c.sock.sendall(struct.pack(">i", len(frame)) + frame)
    assert _closed(c.sock)
    # a size prefix larger than sasl.server.max.receive.size before authentication
    c = _sasl(secure)
    c.sock.sendall(struct.pack(">i", 600_000) + os.urandom(1000))
    assert _closed(c.sock)
    # half a frame then EOF: the broker just drops the connection
    c = _sasl(secure)
    c.sock.sendall(struct.pack(">i", 100) + b"\x00\x11")
    c.sock.shutdown(socket.SHUT_WR)
    assert _closed(c.sock)
    _still_serving(secure)


def test_tls_handshake_of_random_bytes(secure):
    before = _count(secure)
    for port in (secure.ports["SSL"], secure.ports["SASL_SSL"]):
        s = _connect(port)
        s.sendall(os.urandom(4096))
        assert _closed(s)
    lines = _failures(secure, before)
    assert len(lines) == 2 and all("SSL handshake failed" in ln for ln in lines)
    # and a real TLS client still gets in
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca_pem))
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        body = struct.pack(">hhih", 18, 0, 7, 1) + b"x"
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        assert struct.unpack(">i", recv_exact(s, size)[:4])[0] == 7


def test_untrusted_client_certificate_fails_the_handshake(secure, tmp_path):
    from tests.tls_certs import make_certs

    other = make_certs(tmp_path / "other")  # another CA: the broker does not trust it
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca_pem))
    ctx.load_cert_chain(str(other.files["client-cert.pem"]), str(other.files["client-key.pem"]))
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as raw, \
            pytest.raises((ssl.SSLError, ConnectionError)):
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"\x00\x00\x00\x00")
            s.recv(10)


def test_clients_that_never_authenticate_are_closed_when_idle(secure):
    silent = [_connect(secure.ports[p]) for p in ("SASL_PLAINTEXT", "SASL_SSL", "SSL")
              for _ in range(3)]
    started = time.monotonic()
    _still_serving(secure)  # others are served meanwhile
    for s in silent:
        assert _closed(s, timeout=30)
    assert time.monotonic() - started >= 2.5  # connections.max.idle.ms=3000, not at once


def test_v0_handshake_with_raw_tokens(secure):
    c = _sasl(secure)
    resp = c.call(SASL_HANDSHAKE, 0, mechanism="PLAIN")
    assert resp.error_code == 0
    token = b"\x00alice\x00alice-secret"
    c.sock.sendall(struct.pack(">i", len(token)) + token)
    size = struct.unpack(">i", recv_exact(c.sock, 4))[0]
    assert size == 0  # PLAIN's empty challenge, as a raw frame
    resp = c.call(METADATA, 1, _md_request())
    assert resp.brokers


def _login(c: RawClient, password: str = "alice-secret"):
    assert c.call(SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
    return c.call(SASL_AUTHENTICATE, 1, auth_bytes=b"\x00alice\x00" + password.encode())


def test_session_expiry_and_reauthentication(secure):
    c = _sasl(secure)
    resp = _login(c)
    assert resp.error_code == 0 and resp.session_lifetime_ms == 2000
    time.sleep(1.2)
    resp = _login(c)  # re-authenticate within the lifetime: a new session
    assert resp.error_code == 0 and resp.session_lifetime_ms == 2000
    time.sleep(1.2)  # 2.4 s after the first login, 1.2 s into the new session
    assert c.call(METADATA, 1, _md_request()).brokers
    time.sleep(1.0)  # now past the new session's end
    c.send(METADATA, 1, _md_request())
    assert _closed(c.sock)
    assert "SASL session of User:alice expired" in secure.log_text()
    # re-authenticating as someone else is refused
    c = _sasl(secure)
    _login(c)
    assert c.call(SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
    resp = c.call(SASL_AUTHENTICATE, 1, auth_bytes=b"\x00admin\x00admin-secret")
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals" in resp.error_message
    assert _closed(c.sock)
    # SaslHandshake on a PLAINTEXT listener: ILLEGAL_SASL_STATE
    p = RawClient(_Addr(secure.ports["PLAINTEXT"]))
    _OPEN.append(p.sock)
    assert p.call(SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == \
        ErrorCode.ILLEGAL_SASL_STATE


@pytest.mark.java
def test_java_client_reauthenticates(secure, java_client):
    from tests.integration.harness import run_java_client
    from tests.integration.secure_broker import java_props

    before = secure.log_text().count("SASL session of")
    args = []
    for k, v in java_props(secure, "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret").items():
        args += ["--prop", f"{k}={v}"]
    r = run_java_client(java_client, "produce", "--bootstrap", secure.bootstrap("SASL_PLAINTEXT"),
                        "--topic", "reauth", "--count", "12", "--delay-ms", "500",
                        "--linger-ms", "0", *args, timeout=90)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.lines[-1] == "produced 12"
    assert secure.log_text().count("SASL session of") == before  # never expired
