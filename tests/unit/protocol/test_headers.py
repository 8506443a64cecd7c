"""Request/response headers: versions, layouts, round trips, errors (protocol.headers)."""

from __future__ import annotations

import struct

import pytest

from protocol.errors import (
    InvalidStringError,
    TruncatedError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    peek_request_header,
    request_header_version,
    response_header_version,
)


@pytest.mark.parametrize("api_key, version, req, resp", [
    (0, 8, 1, 0), (0, 9, 2, 1),          # Produce: flexible from 9
    (1, 11, 1, 0), (1, 12, 2, 1),        # Fetch: flexible from 12
    (7, 0, 0, 0), (7, 1, 1, 0), (7, 3, 2, 1),  # ControlledShutdown v0 has no client id
    (18, 0, 1, 0), (18, 3, 2, 0), (18, 4, 2, 0),  # ApiVersions response header always v0
    (17, 1, 1, 0),                       # SaslHandshake: never flexible
    (45, 0, 2, 1),                       # AlterPartitionReassignments: flexible from 0
])
def test_header_versions(api_key, version, req, resp):
    assert request_header_version(api_key, version) == req
    assert response_header_version(api_key, version) == resp


def test_unknown_api_key_header_version():
    with pytest.raises(UnknownApiKeyError):
        request_header_version(1000, 0)


def test_request_header_v1_layout():
    h = RequestHeader(3, 4, 77, "cli")
    data = encode_request_header(h)
    assert data == struct.pack(">hhih", 3, 4, 77, 3) + b"cli"
    assert decode_request_header(data + b"body") == (h, len(data))


def test_request_header_v2_keeps_non_compact_client_id_and_tagged_fields():
    h = RequestHeader(18, 3, 5, "client", {0: b"\x01", 3: b""})
    data = encode_request_header(h)
    assert data == struct.pack(">hhih", 18, 3, 5, 6) + b"client" + b"\x02\x00\x01\x01\x03\x00"
    decoded, pos = decode_request_header(data)
    assert decoded == h and pos == len(data)


def test_null_client_id_and_v0_header():
    h = RequestHeader(0, 3, 9, None)
    data = encode_request_header(h)
    assert data.endswith(b"\xff\xff")
    assert decode_request_header(data)[0] == h
    h0 = RequestHeader(7, 0, 11, None)
    data0 = encode_request_header(h0)
    assert data0 == struct.pack(">hhi", 7, 0, 11)
    assert decode_request_header(data0 + b"\x00\x00\x00\x01") == (h0, 8)


def test_decode_errors_carry_the_correlation_id():
    data = struct.pack(">hhi", 0, 99, 1234) + b"\x00\x00"
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request_header(data)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (0, 99, 1234)
    with pytest.raises(UnknownApiKeyError) as info2:
        decode_request_header(struct.pack(">hhi", 500, 0, 8) + b"\x00\x00")
    assert info2.value.correlation_id == 8
    with pytest.raises(TruncatedError):
        decode_request_header(struct.pack(">hhih", 3, 1, 2, 10) + b"abc")
    with pytest.raises(InvalidStringError):
        decode_request_header(struct.pack(">hhih", 3, 1, 2, 2) + b"\xff\xfe")
    with pytest.raises(TruncatedError):
        decode_request_header(b"\x00\x03\x00")


def test_peek_never_fails_on_eight_bytes():
    assert peek_request_header(b"\xff\xff\x7f\xff\x00\x00\x00\x2a") == (-1, 32767, 42)
    assert peek_request_header(memoryview(struct.pack(">hhi", 0, 3, -5))) == (0, 3, -5)
    with pytest.raises(TruncatedError):
        peek_request_header(b"\x00" * 7)


def test_response_header():
    assert encode_response_header(42, 0) == struct.pack(">i", 42)
    assert encode_response_header(42, 1) == struct.pack(">i", 42) + b"\x00"
    assert decode_response_header(encode_response_header(42, 1) + b"x", 1) == (42, 5)
    assert decode_response_header(encode_response_header(-3, 0), 0) == (-3, 4)


def test_header_equality_and_repr():
    assert RequestHeader(1, 2, 3, "a") == RequestHeader(1, 2, 3, "a", {})
    assert RequestHeader(1, 2, 3, "a") != RequestHeader(1, 2, 4, "a")
    assert "client_id='a'" in repr(RequestHeader(1, 2, 3, "a"))
