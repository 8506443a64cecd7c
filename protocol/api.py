"""The Kafka API table and request/response body codecs by api key.

`API_KEYS` maps every api key of the protocol (0 Produce .. 87) to an `ApiSpec` with the
request/response classes from protocol.messages and the version range of the spec
(request and response ranges are identical for every API). The functions here work on
message bodies only: headers are protocol.headers' business and the 4-byte size prefix is
protocol.frames'.

Errors: UnknownApiKeyError (INVALID_REQUEST) for an api key not in the table,
UnsupportedVersionError (UNSUPPORTED_VERSION) for a version outside the range, and the
codec errors of protocol.messages for malformed bodies.
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.errors import UnknownApiKeyError

# Coordinator records (GroupMetadataKey, OffsetCommitValue, ...) are message classes too;
# re-exported here so callers find every codec in one place.
from protocol.messages import (  # noqa: F401
    MESSAGES,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    Message,
    OffsetCommitKey,
    OffsetCommitValue,
    TransactionLogKey,
    TransactionLogValue,
)


class ApiSpec(NamedTuple):
    """One Kafka API: key, name ("Produce"), classes and version range."""

    api_key: int
    name: str
    request_cls: type
    response_cls: type
    min_version: int
    max_version: int
    flexible_min_version: int | None
    deprecated_versions: tuple[int, int] | None = None
    latest_version_unstable: bool = False

    def is_flexible(self, version: int) -> bool:
        return self.flexible_min_version is not None and version >= self.flexible_min_version


def _build() -> dict[int, ApiSpec]:
    table = {}
    for name, cls in MESSAGES.items():
        if cls.kind != "request":
            continue
        base = name.removesuffix("Request")
        resp = MESSAGES[base + "Response"]
        table[cls.api_key] = ApiSpec(
            cls.api_key, base, cls, resp, cls.min_version, cls.max_version,
            cls.flexible_min_version, cls.deprecated_versions, cls.latest_version_unstable)
    return dict(sorted(table.items()))


API_KEYS: dict[int, ApiSpec] = _build()
API_BY_NAME: dict[str, ApiSpec] = {s.name: s for s in API_KEYS.values()}


def api_spec(api_key: int) -> ApiSpec:
    """The ApiSpec for api_key; raises UnknownApiKeyError."""
    try:
        return API_KEYS[api_key]
    except KeyError:
        raise UnknownApiKeyError(f"unknown api key {api_key}") from None


def decode_request(api_key: int, version: int, buf, offset: int = 0) -> Message:
    """Decode a request body at buf[offset:]; bytes after the body are ignored."""
    return api_spec(api_key).request_cls.decode(buf, version, offset)


def encode_request(msg: Message, version: int) -> bytes:
    """Encode a request body (no header, no size prefix)."""
    return msg.encode(version)


def decode_response(api_key: int, version: int, buf, offset: int = 0) -> Message:
    """Decode a response body at buf[offset:]."""
    return api_spec(api_key).response_cls.decode(buf, version, offset)


def encode_response(msg: Message, version: int) -> bytes:
    """Encode a response body (no header, no size prefix); records must be bytes-like."""
    return msg.encode(version)


def encode_response_parts(msg: Message, version: int) -> list:
    """Encode a response body as `[bytes, obj, bytes, obj, ..., bytes]`.

    Each `obj` is a records value that is not bytes-like (e.g. a storage FileRecords with
    `__len__`); its length prefix is already in the preceding bytes segment, so the
    network layer writes the segments in order and sends each obj's bytes itself
    (sendfile). With only bytes-like records the result is a single bytes segment.
    The total body size is `sum(len(p) for p in parts)`.
    """
    return msg.encode_parts(version)


__all__ = [
    "API_BY_NAME",
    "API_KEYS",
    "ApiSpec",
    "api_spec",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
]
