"""Kafka's ACL vocabulary, shared by clients, tools and the broker (its
``org.apache.kafka.common.acl`` and ``org.apache.kafka.common.resource``): resource types,
operations, permission types and pattern types with their wire codes (the ``int8`` values of
DescribeAcls / CreateAcls / DeleteAcls), which operations each resource type accepts,
``ResourcePattern``, ``AclEntry``, ``AclBinding`` and ``AclBindingFilter``.

Names are what kafka-acls.sh prints; ``znode_name`` is the camel-case form ZooKeeper
documents use (``broker.security.acl``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["AclBinding", "AclBindingFilter", "AclEntry", "AclOperation", "AclPermissionType",
           "PatternType", "ResourcePattern", "ResourceType", "CLUSTER_NAME",
           "SUPPORTED_OPERATIONS", "WILDCARD", "WILDCARD_HOST", "code_name"]

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"  # resource name / principal name matching everything
WILDCARD_HOST = "*"


class _AclEnum(enum.IntEnum):
    @property
    def znode_name(self) -> str:
        """The camel-case name ZooKeeper documents use: ``Topic``, ``TransactionalId``,
        ``ClusterAction``, ``Allow`` ... (Kafka's ``SecurityUtils.resourceTypeName`` and
        ``AclEntry`` JSON)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class ResourceType(_AclEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @classmethod
    def parse(cls, text: str) -> ResourceType:
        """``Topic``, ``TOPIC``, ``transactional-id``, ``TransactionalId`` ...; ValueError."""
        return _parse_name(cls, text, "resource type")


class AclOperation(_AclEnum):
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

    @classmethod
    def parse(cls, text: str) -> AclOperation:
        """``Read``, ``CLUSTER_ACTION``, ``cluster-action``, ``ClusterAction`` ...; ValueError."""
        return _parse_name(cls, text, "operation")


class AclPermissionType(_AclEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @classmethod
    def parse(cls, text: str) -> AclPermissionType:
        return cls[text.upper()]


class PatternType(_AclEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @classmethod
    def parse(cls, text: str) -> PatternType:
        return cls[text.upper()]


def code_name(kind: type[enum.IntEnum], code: int) -> str:
    """The name kafka-acls.sh prints for a wire code of ``kind`` (``TOPIC``, ``READ``, ...),
    or the number itself for a code this version does not know."""
    try:
        return kind(code).name
    except ValueError:
        return str(code)


def _parse_name(kind, text: str, what: str):
    """The member of ``kind`` named ``text`` in any case, with or without ``_``/``-``."""
    key = text.replace("_", "").replace("-", "").lower()
    for member in kind:
        if member.name.replace("_", "").lower() == key:
            return member
    raise ValueError(f"unknown {what} {text}")


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


@dataclass(frozen=True)
class AclBindingFilter:
    """Kafka's ``AclBindingFilter``: None name/principal/host = any; ANY types match all;
    pattern type MATCH matches what a literal name would match (itself, ``*``, prefixes)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not p.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt is not p.pattern_type:
            return False
        if self.name is None:
            return True
        if pt is PatternType.ANY or pt is p.pattern_type:
            return self.name == p.name
        if p.pattern_type is PatternType.LITERAL:  # MATCH
            return self.name == p.name or p.name == WILDCARD
        return self.name.startswith(p.name)

    def matches_entry(self, e: AclEntry) -> bool:
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and (self.operation is AclOperation.ANY or self.operation is e.operation)
                and (self.permission_type is AclPermissionType.ANY
                     or self.permission_type is e.permission_type))

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)
