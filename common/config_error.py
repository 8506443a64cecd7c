"""`ConfigError`: a configuration value is invalid (Kafka's ``ConfigException``).

Raised by the broker's config (``broker.config.KafkaConfig``), the coordinators' settings and
the tools; the broker stops at startup naming the key, a tool exits with the message. The
value of a sensitive key (Kafka's PASSWORD type: ``ssl.keystore.password``,
``sasl.jaas.config``, ...) is never shown: the key tables that know them add their names to
`SENSITIVE_KEYS` (``common.config_keys`` does for the broker's keys).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConfigError", "ConfigFileError", "SENSITIVE_KEYS"]

#: keys whose values a ConfigError message shows as ``[hidden]``
SENSITIVE_KEYS: set[str] = set()


class ConfigError(ValueError):
    """A configuration value is invalid. ``key``, ``value`` and ``allowed`` say which and why.

    The message reads like Kafka's ``ConfigException``:
    ``Invalid value abc for configuration num.partitions: allowed: a 32-bit integer in [1,...]``.
    """

    def __init__(self, key: str, value: Any, allowed: str, reason: str | None = None):
        self.key = key
        self.value = value
        self.allowed = allowed
        shown = "[hidden]" if key in SENSITIVE_KEYS else value
        msg = f"Invalid value {shown!r} for configuration {key}"
        if reason:
            msg += f": {reason}"
        msg += f" (allowed: {allowed})"
        super().__init__(msg)


class ConfigFileError(ConfigError):
    """The properties file cannot be read or is not valid properties syntax."""

    def __init__(self, path: str, reason: str):
        ValueError.__init__(self, f"Cannot load config file {path}: {reason}")
        self.key = "config file"
        self.value = path
        self.allowed = "a readable file in Java properties syntax"
