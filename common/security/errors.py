"""Security failures both sides raise (Kafka's ``org.apache.kafka.common.errors``)."""

from __future__ import annotations

__all__ = ["SaslAuthenticationError"]


class SaslAuthenticationError(Exception):
    """SASL authentication failed; the message is the one the peer is told (Kafka's
    ``SaslAuthenticationException``, error code SASL_AUTHENTICATION_FAILED = 58)."""
