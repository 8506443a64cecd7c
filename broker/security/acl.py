"""Kafka's ZooKeeper ACL documents (``kafka.security.authorizer.AclEntry``, ``ZkData``); the
vocabulary (resource types, operations, patterns, entries) is ``common.acl``.

ZooKeeper layout (``ResourceZNode`` / ``ZkAclChangeStore``)::

    /kafka-acl/<ResourceType>/<name>                     LITERAL patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>    PREFIXED patterns
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                  "Topic:foo" (literal change)
    /kafka-acl-extended-changes/acl_changes_<seq>
        {"version":1,"resourceType":"Topic","name":"foo","patternType":"PREFIXED"}
"""

from __future__ import annotations

import json
import logging

from common.acl import (
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

__all__ = ["ACL_ROOT", "CHANGE_PREFIX", "EXTENDED_ACL_ROOT", "EXTENDED_CHANGES",
           "LITERAL_CHANGES", "acl_change_node", "decode_acl_change", "decode_acls",
           "encode_acls", "resource_znode"]

log = logging.getLogger(__name__)

ACL_ROOT = "/kafka-acl"
EXTENDED_ACL_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"


def resource_znode(pattern: ResourcePattern) -> str:
    rt = pattern.resource_type.znode_name
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{ACL_ROOT}/{rt}/{pattern.name}"
    return f"{EXTENDED_ACL_ROOT}/{pattern.pattern_type.name.lower()}/{rt}/{pattern.name}"


def encode_acls(entries) -> bytes:
    acls = [{"principal": e.principal, "permissionType": e.permission_type.znode_name,
             "operation": e.operation.znode_name, "host": e.host}
            for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation,
                                                    e.permission_type))]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(path: str, data: bytes | None) -> set[AclEntry]:
    """The entries of an ACL znode; unreadable entries are logged with the path and skipped."""
    if not data:
        return set()
    try:
        doc = json.loads(data)
        items = doc["acls"]
        if not isinstance(items, list):
            raise ValueError("acls is not a list")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        log.error("skipping ACL znode %s with bad data: %s", path, e)
        return set()
    out = set()
    for item in items:
        try:
            out.add(AclEntry(str(item["principal"]), str(item["host"]),
                             AclOperation.parse(item["operation"]),
                             AclPermissionType.parse(item["permissionType"])))
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            log.error("skipping a bad ACL entry %r in %s: %s", item, path, e)
    return out


def acl_change_node(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(sequential node prefix, data) announcing a change of ``pattern``'s ACLs."""
    if pattern.pattern_type is PatternType.LITERAL:
        return (f"{LITERAL_CHANGES}/{CHANGE_PREFIX}",
                f"{pattern.resource_type.znode_name}:{pattern.name}".encode())
    doc = {"version": 1, "resourceType": pattern.resource_type.znode_name,
           "name": pattern.name, "patternType": pattern.pattern_type.name}
    return f"{EXTENDED_CHANGES}/{CHANGE_PREFIX}", json.dumps(doc, separators=(",", ":")).encode()


def decode_acl_change(literal: bool, data: bytes | None) -> ResourcePattern:
    """A change notification's pattern; ValueError when unreadable."""
    text = (data or b"").decode("utf-8", "replace")
    if literal:
        rt, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"expected a string in format ResourceType:ResourceName but got "
                             f"{text}")
        return ResourcePattern(ResourceType.parse(rt), name, PatternType.LITERAL)
    doc = json.loads(text)
    if doc.get("version", 1) > 1:
        raise ValueError(f"Acl change event received for unsupported version: {doc['version']}")
    return ResourcePattern(ResourceType.parse(doc["resourceType"]), str(doc["name"]),
                           PatternType.parse(doc["patternType"]))
