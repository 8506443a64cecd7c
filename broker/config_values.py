"""Parsing broker config values (Kafka's ``ConfigDef`` types and the listener syntax), the
half of ``broker.config`` that knows no ``KafkaConfig``.

- :func:`parse_value` ``(ConfigKey, raw) -> value``: values are trimmed; booleans are
  ``true``/``false`` (any case); integers are decimal within the type's width (INT 32-bit,
  SHORT 16-bit, LONG 64-bit); LIST values are comma-separated; already typed values are
  checked against the type. A value that does not parse, is out of range or fails the key's
  validator raises :class:`ConfigError` naming the key, the value and what is allowed.
- :func:`to_string`: the string form Kafka reports (DescribeConfigs).
- :func:`parse_override`: ``--override key=value``.
- :func:`parse_listeners`: ``NAME://host:port,...`` (IPv6 hosts in brackets) into
  ``Endpoint`` s; :func:`parse_protocol_map`: ``listener.security.protocol.map``.
(``listener_key``, which names the per-listener keys, is in ``common.config_keys``.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from common.config_error import ConfigError
from common.config_keys import (
    ConfigKey,
    ConfigType,
)
from controller.zk_data import SECURITY_PROTOCOL_IDS, Endpoint

__all__ = ["parse_listeners", "parse_override",
           "parse_protocol_map", "parse_value", "to_string"]

_TYPE_BOUNDS = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}
_TYPE_NAMES = {
    ConfigType.BOOLEAN: "a boolean (true or false)",
    ConfigType.SHORT: "a 16-bit integer",
    ConfigType.INT: "a 32-bit integer",
    ConfigType.LONG: "a 64-bit integer",
    ConfigType.DOUBLE: "a number",
    ConfigType.STRING: "a string",
    ConfigType.LIST: "a comma-separated list",
    ConfigType.PASSWORD: "a string",
    ConfigType.CLASS: "a class name",
}
_INT_RE = re.compile(r"[+-]?[0-9]+")
_LISTENER_RE = re.compile(r"^(?P<name>[A-Za-z0-9_\-]+)://\[?(?P<host>[0-9A-Za-z\-%._:]*?)\]?:(?P<port>-?[0-9]+)$")
_SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_override(text: str) -> tuple[str, str]:
    """Split ``key=value`` (at the first ``=``); raise :class:`ConfigError` without one."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError("--override", text, "key=value")
    return key, value


def parse_value(key: ConfigKey, raw: Any) -> Any:
    """Parse ``raw`` (a string, or an already typed value) for ``key``; validate its range."""
    if raw is None:
        return None
    t = key.type
    allowed = _TYPE_NAMES[t] + (f" in {key.validator}" if key.validator else "")
    if isinstance(raw, str):
        s = raw.strip()
        if t is ConfigType.BOOLEAN:
            if s.lower() not in ("true", "false"):
                raise ConfigError(key.name, raw, allowed, "expected true or false")
            value: Any = s.lower() == "true"
        elif t in _TYPE_BOUNDS:
            if not _INT_RE.fullmatch(s):
                raise ConfigError(key.name, raw, allowed, "not an integer")
            value = int(s)
        elif t is ConfigType.DOUBLE:
            try:
                value = float(s)
            except ValueError:
                raise ConfigError(key.name, raw, allowed, "not a number") from None
        elif t is ConfigType.LIST:
            value = [] if s == "" else [item.strip() for item in s.split(",")]
        else:
            value = s
    else:
        value = raw
        if t is ConfigType.BOOLEAN and not isinstance(value, bool):
            raise ConfigError(key.name, raw, allowed)
        if t in _TYPE_BOUNDS and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(key.name, raw, allowed)
        if t in (ConfigType.STRING, ConfigType.PASSWORD, ConfigType.CLASS) \
                and not isinstance(value, str):
            raise ConfigError(key.name, raw, allowed)
        if t is ConfigType.DOUBLE and (isinstance(value, bool)
                                       or not isinstance(value, int | float)):
            raise ConfigError(key.name, raw, allowed)
        if t is ConfigType.LIST:
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise ConfigError(key.name, raw, allowed)
            value = [str(v) for v in value]
    if t in _TYPE_BOUNDS:
        lo, hi = _TYPE_BOUNDS[t]
        if not lo <= value <= hi:
            raise ConfigError(key.name, raw, allowed, "out of range for the type")
    if key.validator is not None and not key.validator.accepts(value):
        raise ConfigError(key.name, raw, allowed)
    return value


def to_string(key: ConfigKey, value: Any) -> str | None:
    """The string form Kafka reports for a parsed value (None for null)."""
    if value is None:
        return None
    if key.type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if key.type is ConfigType.LIST:
        return ",".join(value)
    return str(value)


def parse_listeners(
    key: str, text: str, protocol_map: Mapping[str, str], *, supported_only: bool = True
) -> list[Endpoint]:
    """Parse a ``listeners``-style value (``NAME://host:port,...``) into endpoints.

    Raises :class:`ConfigError` (naming ``key``) for a malformed entry, a port outside
    0..65535, a duplicate listener name, a name missing from
    ``listener.security.protocol.map``, or (``supported_only``) a protocol other than PLAINTEXT.
    """
    endpoints: list[Endpoint] = []
    seen: set[str] = set()
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        m = _LISTENER_RE.match(item)
        if not m:
            raise ConfigError(key, text, "NAME://host:port[,NAME://host:port...]",
                              f"malformed listener {item!r}")
        name, host, port = m["name"].upper(), m["host"], int(m["port"])
        if not 0 <= port <= 65535:
            raise ConfigError(key, text, "ports in 0..65535", f"bad port in {item!r}")
        if name in seen:
            raise ConfigError(key, text, "each listener name at most once",
                              f"duplicate listener name {name}")
        seen.add(name)
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ConfigError(key, text, "listener names from listener.security.protocol.map: "
                              + ", ".join(protocol_map),
                              f"no security protocol for listener {name}")
        if supported_only and protocol not in _SUPPORTED_PROTOCOLS:
            raise ConfigError(key, text, "listeners using " + ", ".join(_SUPPORTED_PROTOCOLS),
                              f"security protocol {protocol} is not supported by Josef yet")
        endpoints.append(Endpoint(name, host, port, protocol))
    return endpoints




def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``) -> {NAME: PROTOCOL}, names
    upper-cased; ConfigError on an entry without ``:`` or with an unknown protocol."""
    key = "listener.security.protocol.map"
    allowed = "NAME:PROTOCOL[,NAME:PROTOCOL...] with PROTOCOL one of " \
        + ", ".join(SECURITY_PROTOCOL_IDS)
    result: dict[str, str] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in SECURITY_PROTOCOL_IDS:
            raise ConfigError(key, text, allowed, f"bad entry {item!r}")
        result[name.strip().upper()] = protocol
    return result
