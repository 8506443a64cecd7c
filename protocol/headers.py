"""Kafka request and response headers (docs/protocol.html, "Headers"; KIP-482).

Request header layouts (all big-endian):

    v0: api_key int16 | api_version int16 | correlation_id int32
    v1: v0 + client_id NULLABLE_STRING (int16 length, -1 = null)
    v2: v1 + TAGGED_FIELDS            (client_id stays a non-compact string)

Response header layouts:

    v0: correlation_id int32
    v1: v0 + TAGGED_FIELDS

Header versions: a request uses v2 when its API version is flexible, else v1; only
ControlledShutdown v0 uses v0. A response uses v1 when flexible, else v0, except
ApiVersions, whose response header is always v0 (a client must be able to read it
before it knows which versions the broker supports; KIP-511).
"""

from __future__ import annotations

import struct

from protocol.errors import (
    InvalidLengthError,
    InvalidStringError,
    TruncatedError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from protocol.schema_gen import SCHEMAS
from protocol.types import (
    INT32,
    decode_string,
    decode_tagged_fields,
    encode_string,
    encode_tagged_fields,
)

_HDR = struct.Struct(">hhi")

CONTROLLED_SHUTDOWN_KEY = 7
API_VERSIONS_KEY = 18

# api_key -> (min_version, max_version, flexible_min_version or None)
_VERSIONS: dict[int, tuple[int, int, int | None]] = {
    s["api_key"]: (s["valid"][0], s["valid"][1], s["flexible"][0] if s["flexible"] else None)
    for s in SCHEMAS.values()
    if s["kind"] == "request"
}


def _range(api_key: int) -> tuple[int, int, int | None]:
    try:
        return _VERSIONS[api_key]
    except KeyError:
        raise UnknownApiKeyError(f"unknown api key {api_key}") from None


def _is_flexible(api_key: int, api_version: int) -> bool:
    flex = _range(api_key)[2]
    return flex is not None and api_version >= flex


def request_header_version(api_key: int, api_version: int) -> int:
    """0, 1 or 2 (see the module docstring). Raises UnknownApiKeyError."""
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if _is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """0 or 1; ApiVersions responses always use 0. Raises UnknownApiKeyError."""
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if _is_flexible(api_key, api_version) else 0


class RequestHeader:
    """A decoded request header; `tagged_fields` maps tag -> raw bytes (or is None)."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "tagged_fields")

    def __init__(
        self,
        api_key: int = 0,
        api_version: int = 0,
        correlation_id: int = 0,
        client_id: str | None = None,
        tagged_fields: dict[int, bytes] | None = None,
    ) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.tagged_fields = tagged_fields

    def _key(self) -> tuple:
        return (self.api_key, self.api_version, self.correlation_id, self.client_id,
                self.tagged_fields or None)

    def __eq__(self, other: object) -> bool:
        if type(other) is not RequestHeader:
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r}"
                + (f", tagged_fields={self.tagged_fields!r})" if self.tagged_fields else ")"))


def peek_request_header(buf) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes, without validation.

    Never fails on >= 8 bytes; raises TruncatedError on fewer.
    """
    if len(buf) < 8:
        raise TruncatedError(f"request header needs 8 bytes, got {len(buf)}")
    return _HDR.unpack_from(buf, 0)


def decode_request_header(buf) -> tuple[RequestHeader, int]:
    """Decode the request header at the start of buf -> (header, body offset).

    Raises UnknownApiKeyError (INVALID_REQUEST) for an unknown api key,
    UnsupportedVersionError (UNSUPPORTED_VERSION) for a version outside the API's range,
    TruncatedError / InvalidLengthError / InvalidStringError for a malformed header.
    The raised error carries `api_key`, `api_version` and `correlation_id` attributes so the
    caller can still answer the request.
    """
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)
    api_key, api_version, correlation_id = peek_request_header(buf)
    try:
        lo, hi, flex = _range(api_key)
        if not lo <= api_version <= hi:
            raise UnsupportedVersionError(
                f"api key {api_key} version {api_version} not in {lo}-{hi}")
        pos = 8
        if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
            return RequestHeader(api_key, api_version, correlation_id, None, None), pos
        client_id, pos = decode_string(buf, pos, nullable=True)
        tagged = None
        if flex is not None and api_version >= flex:
            tagged, pos = decode_tagged_fields(buf, pos)
    except (UnknownApiKeyError, UnsupportedVersionError, TruncatedError,
            InvalidLengthError, InvalidStringError) as exc:
        exc.api_key, exc.api_version, exc.correlation_id = api_key, api_version, correlation_id
        raise
    return RequestHeader(api_key, api_version, correlation_id, client_id, tagged), pos


def encode_request_header(header: RequestHeader) -> bytes:
    """Encode a request header in the version its api key/version call for."""
    version = request_header_version(header.api_key, header.api_version)
    out = bytearray(_HDR.pack(header.api_key, header.api_version, header.correlation_id))
    if version >= 1:
        out += encode_string(header.client_id)
    if version >= 2:
        encode_tagged_fields(header.tagged_fields, out)
    return bytes(out)


_EMPTY_TAGS = b"\x00"


def encode_response_header(correlation_id: int, version: int) -> bytes:
    """Response header v0 (correlation id) or v1 (+ empty tagged fields)."""
    if version == 0:
        return INT32.pack(correlation_id)
    return INT32.pack(correlation_id) + _EMPTY_TAGS


def decode_response_header(buf, version: int) -> tuple[int, int]:
    """(correlation_id, body offset) of a response header v0/v1 (tagged fields skipped)."""
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)
    if len(buf) < 4:
        raise TruncatedError("response header needs 4 bytes")
    (correlation_id,) = INT32.unpack_from(buf, 0)
    pos = 4
    if version >= 1:
        _, pos = decode_tagged_fields(buf, pos)
    return correlation_id, pos


__all__ = [
    "RequestHeader",
    "decode_request_header",
    "decode_response_header",
    "encode_request_header",
    "encode_response_header",
    "peek_request_header",
    "request_header_version",
    "response_header_version",
]
