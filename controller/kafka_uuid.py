"""Kafka-style UUIDs: topic IDs and cluster IDs.

Kafka prints a UUID (16 bytes) as URL-safe base64 without padding: 22 characters from
``[A-Za-z0-9_-]`` (``Uuid.toString``). That text is what ``/cluster/id`` and the
``topic_id`` key of ``/brokers/topics/<t>`` hold. Random IDs are never the reserved all-zero
UUID (``Uuid.ZERO_UUID``, "no topic ID"), never ``Uuid.METADATA_TOPIC_ID`` (0...01), and
never print with a leading ``-`` (it would read like a command-line flag); the generator
draws again in those cases, as Kafka's ``Uuid.randomUuid`` does.
"""

from __future__ import annotations

import base64
import binascii
import uuid

ZERO_UUID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)


class InvalidUuidError(ValueError):
    """Text that is not a 22-character URL-safe base64 UUID."""


def to_base64(value: uuid.UUID) -> str:
    """``uuid`` -> 22-char URL-safe base64 text without padding (Kafka's ``Uuid.toString``)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def from_base64(text: str) -> uuid.UUID:
    """Inverse of :func:`to_base64`; raises :class:`InvalidUuidError` on bad text."""
    if not isinstance(text, str) or len(text) != 22:
        raise InvalidUuidError(f"not a 22-character base64 UUID: {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as exc:
        raise InvalidUuidError(f"not a base64 UUID: {text!r}") from exc
    if len(raw) != 16 or to_base64(uuid.UUID(bytes=raw)) != text:
        raise InvalidUuidError(f"not a canonical base64 UUID: {text!r}")
    return uuid.UUID(bytes=raw)


def random_uuid() -> uuid.UUID:
    """A random (version 4) UUID that is not reserved and does not print with a leading '-'."""
    while True:
        value = uuid.uuid4()
        if value in (ZERO_UUID, METADATA_TOPIC_ID):
            continue
        if to_base64(value).startswith("-"):
            continue
        return value
