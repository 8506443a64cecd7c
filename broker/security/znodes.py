"""Kafka's ZooKeeper layout for client configs (credentials, quotas) and config change
notifications (Kafka's ``ZkData``: ``ConfigEntityZNode``, ``ConfigEntityChangeNotification
SequenceZNode``; ``Sanitizer`` for entity names). ACL and delegation-token znodes are in
``broker.security.acl`` and ``broker.security.delegation_tokens``.

* ``/config/users/<user>``, ``/config/clients/<client-id>``,
  ``/config/users/<user>/clients/<client-id>``: ``{"version":1,"config":{"k":"v",...}}``;
  ``<default>`` is the default entity; names are sanitized (URL-encoded, ``*`` as ``%2A``).
  A user's config holds SCRAM credentials (``SCRAM-SHA-256``/``SCRAM-SHA-512`` keys) and
  quotas (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
  ``controller_mutation_rate``).
* ``/config/changes/config_change_<10-digit seq>``: ``{"version":2,"entity_path":"users/alice"}``
  (or ``users/alice/clients/c1``, ``clients/c1``) after every change.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import quote, unquote

__all__ = ["CONFIG_CHANGES", "CONFIG_CHANGE_PREFIX", "DEFAULT_ENTITY", "decode_config",
           "encode_config", "encode_change", "decode_change", "entity_znode", "sanitize",
           "desanitize"]

log = logging.getLogger(__name__)

DEFAULT_ENTITY = "<default>"
CONFIG_ROOT = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encode (space -> %20, ``*`` -> %2A, ``~`` kept)."""
    return quote(name, safe="._-~")


def desanitize(name: str) -> str:
    return unquote(name)


def entity_znode(entity_path: str) -> str:
    """``users/alice`` -> ``/config/users/alice`` (entity paths are already sanitized)."""
    return f"{CONFIG_ROOT}/{entity_path}"


def encode_config(config: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(config)}, separators=(",", ":")).encode()


def decode_config(path: str, data: bytes | None) -> dict[str, str]:
    """The ``config`` map of an entity znode; bad JSON is logged with the path and read as
    empty (Kafka skips it too)."""
    if not data:
        return {}
    try:
        doc = json.loads(data)
        config = doc.get("config", {}) if isinstance(doc, dict) else None
        if not isinstance(config, dict):
            raise ValueError("no config object")
        return {str(k): str(v) for k, v in config.items()}
    except (ValueError, UnicodeDecodeError) as e:
        log.error("skipping config znode %s with bad data: %s", path, e)
        return {}


def encode_change(entity_path: str) -> bytes:
    return json.dumps({"version": 2, "entity_path": entity_path},
                      separators=(",", ":")).encode()


def decode_change(data: bytes | None) -> str | None:
    """The entity path of a version 2 change notification (None if unreadable)."""
    try:
        doc = json.loads(data or b"")
        if isinstance(doc, dict) and doc.get("version") == 2:
            return str(doc["entity_path"])
    except (ValueError, KeyError, UnicodeDecodeError):
        pass
    return None
