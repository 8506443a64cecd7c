"""ACL vocabulary and Kafka's ZooKeeper ACL documents (``org.apache.kafka.common.acl``,
``org.apache.kafka.common.resource``, ``kafka.security.authorizer.AclEntry``, ``ZkData``).

Codes are the wire values of the ACL APIs; names are what ZooKeeper documents and
kafka-acls.sh print.

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

import enum
import json
import logging
from dataclasses import dataclass

__all__ = ["AclBinding", "AclEntry", "AclOperation", "AclPermissionType", "PatternType",
           "ResourcePattern", "ResourceType", "CLUSTER_NAME", "WILDCARD", "WILDCARD_HOST",
           "acl_change_node", "decode_acl_change", "decode_acls", "encode_acls",
           "resource_znode"]

log = logging.getLogger(__name__)

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"  # resource name / principal name matching everything
WILDCARD_HOST = "*"
ACL_ROOT = "/kafka-acl"
EXTENDED_ACL_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def znode_name(self) -> str:
        """``Topic``, ``Group``, ``Cluster``, ``TransactionalId``, ``DelegationToken``,
        ``User`` (Kafka's ``SecurityUtils.resourceTypeName``)."""
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> ResourceType:
        key = text.replace("_", "").replace("-", "").lower()
        for rt in cls:
            if rt.name.replace("_", "").lower() == key:
                return rt
        raise ValueError(f"unknown resource type {text}")


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @property
    def znode_name(self) -> str:
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> AclOperation:
        key = text.replace("_", "").replace("-", "").lower()
        for op in cls:
            if op.name.replace("_", "").lower() == key:
                return op
        raise ValueError(f"unknown operation {text}")


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def znode_name(self) -> str:
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> AclPermissionType:
        return cls[text.upper()]


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @classmethod
    def parse(cls, text: str) -> PatternType:
        return cls[text.upper()]


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


#: operations each resource type accepts in ACLs and authorized-operations fields
#: (Kafka 3.9's ``AclEntry.supportedOperations``)
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                           AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@dataclass(frozen=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True)
class AclEntry:
    """One access control entry: who, from where, what, allow or deny."""

    principal: str  # "User:alice", "User:*"
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


@dataclass(frozen=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AclEntry


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
