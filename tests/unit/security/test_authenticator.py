"""SaslServerAuthenticator: the states of Kafka's SaslServerAuthenticator, frame by frame,
with a manual clock (session lifetimes, KIP-368 re-authentication)."""

from __future__ import annotations

import struct

from broker.handlers import load_all
from broker.security.authenticator import SaslServerAuthenticator, SaslState
from broker.security.principal import KafkaPrincipal
from protocol import api
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader, encode_request_header, response_header_version

load_all()


class Creds:
    def plain_password_ok(self, listener, user, password):
        return password == f"{user}-secret"

    def scram_credential(self, mech, user):
        return None

    def token_credential(self, mech, token_id):
        return None

    def oauth_options(self, listener):
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def frame(key: int, version: int, cid: int = 1, **fields) -> bytes:
    head = encode_request_header(RequestHeader(key, version, cid, "test"))
    return head + api.encode_request(api.API_KEYS[key].request_cls(**fields), version)


def decode(key: int, version: int, payload: bytes):
    offset = 4 + (1 if response_header_version(key, version) else 0)
    return api.decode_response(key, version, memoryview(payload), offset)


def make(clock=None, reauth_ms=0):
    return SaslServerAuthenticator("SASL_PLAINTEXT", ["PLAIN", "SCRAM-SHA-256"], Creds(),
                                   reauth_ms=lambda m: reauth_ms, time_ms=clock or Clock())


def test_api_versions_then_handshake_then_authenticate():
    a = make()
    step = a.receive(frame(18, 3, client_software_name="x", client_software_version="1"))
    assert step.api_versions and a.state is SaslState.HANDSHAKE_REQUEST
    step = a.receive(frame(18, 3))  # a second ApiVersions is not allowed any more
    assert step.failure and "Unexpected ApiVersions" in step.failure

    a = make()
    step = a.receive(frame(17, 1, mechanism="PLAIN"))
    resp = decode(17, 1, step.response)
    assert resp.error_code == 0 and resp.mechanisms == ["PLAIN", "SCRAM-SHA-256"]
    step = a.receive(frame(36, 2, cid=2, auth_bytes=b"\x00alice\x00alice-secret"))
    resp = decode(36, 2, step.response)
    assert resp.error_code == 0 and resp.session_lifetime_ms == 0
    assert step.complete and a.principal == KafkaPrincipal("User", "alice")
    assert a.supports_reauth


def test_invalid_api_versions_keeps_the_state():
    a = make()
    step = a.receive(frame(18, 3, client_software_name="bad name!", client_software_version="1"))
    assert step.api_versions and a.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST


def test_failures():
    a = make()
    step = a.receive(frame(17, 1, mechanism="GSSAPI"))
    assert decode(17, 1, step.response).error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert step.failure == "Unsupported SASL mechanism GSSAPI"
    assert a.state is SaslState.FAILED

    a = make()
    a.receive(frame(17, 1, mechanism="PLAIN"))
    step = a.receive(frame(36, 1, auth_bytes=b"\x00alice\x00nope"))
    resp = decode(36, 1, step.response)
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert resp.error_message == "Authentication failed: Invalid username or password"
    assert step.failure and not step.complete

    step = make().receive(b"\x60\x82\x01\x02garbage")  # a GSSAPI token of a 0.9 client
    assert step.failure and "GSSAPI is not supported" in step.failure and step.response is None
    step = make().receive(b"\x00\x01")
    assert step.failure

    a = make()  # a Produce before authentication: no response, closed
    step = a.receive(frame(0, 3, acks=1, timeout_ms=1, topic_data=[]))
    assert step.failure == "Unexpected Kafka request of type Produce during SASL handshake."
    assert step.response is None

    a = make()  # another request during authentication: its error response
    a.receive(frame(17, 1, mechanism="PLAIN"))
    step = a.receive(frame(3, 1, topics=[]))
    assert step.failure and step.response is not None

    a = make()  # a truncated SaslAuthenticate
    a.receive(frame(17, 1, mechanism="PLAIN"))
    step = a.receive(frame(36, 1, auth_bytes=b"abc")[:-2])
    assert step.failure


def test_v0_handshake_uses_raw_tokens():
    a = make()
    a.receive(frame(17, 0, mechanism="PLAIN"))
    step = a.receive(b"\x00bob\x00bob-secret")
    assert step.complete and step.response == b""  # sent as an empty frame
    a = make()
    a.receive(frame(17, 0, mechanism="PLAIN"))
    step = a.receive(b"\x00bob\x00wrong")
    assert step.failure and step.response is None


def test_session_lifetime_and_reauthentication():
    clock = Clock()
    a = make(clock, reauth_ms=10_000)
    a.receive(frame(17, 1, mechanism="PLAIN"))
    step = a.receive(frame(36, 1, auth_bytes=b"\x00bob\x00bob-secret"))
    assert decode(36, 1, step.response).session_lifetime_ms == 10_000
    assert not a.session_expired(clock.now + 9_999)
    assert a.session_expired(clock.now + 10_000)
    # re-authentication: same mechanism, same principal
    clock.now += 9_000
    req = api.API_KEYS[36].request_cls
    resp, failure = a.begin_reauthentication("PLAIN")
    assert resp.error_code == 0 and failure is None and a.state is SaslState.AUTHENTICATE
    assert not a.session_expired(clock.now + 50_000)  # not expired while re-authenticating
    resp, failure = a.authenticate(req(auth_bytes=b"\x00bob\x00bob-secret"), 1)
    assert resp.error_code == 0 and resp.session_lifetime_ms == 10_000 and failure is None
    assert a.session_expiry_ms == clock.now + 10_000
    # another principal is refused
    a.begin_reauthentication("PLAIN")
    resp, failure = a.authenticate(req(auth_bytes=b"\x00eve\x00eve-secret"), 1)
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals during re-authentication" in resp.error_message
    # another mechanism is refused at the first token
    b = make(clock)
    b.receive(frame(17, 1, mechanism="PLAIN"))
    b.receive(frame(36, 1, auth_bytes=b"\x00bob\x00bob-secret"))
    resp, failure = b.begin_reauthentication("SCRAM-SHA-256")
    assert resp.error_code == 0
    resp, failure = b.authenticate(req(auth_bytes=b"n,,n=bob,r=x"), 1)
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "not supported for re-authentication of mechanism 'PLAIN'" in failure


def test_no_session_lifetime_without_limits():
    a = make()
    a.receive(frame(17, 1, mechanism="PLAIN"))
    a.receive(frame(36, 1, auth_bytes=b"\x00bob\x00bob-secret"))
    assert a.session_expiry_ms is None and not a.session_expired(1e18)


def test_frame_helper_is_a_request():
    assert struct.unpack(">h", frame(17, 1, mechanism="PLAIN")[:2])[0] == 17
