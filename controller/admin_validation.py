"""Checks behind CreateTopics / CreatePartitions (Kafka's Topic.validate and the replica
assignment rules of AdminZkClient). Each check raises ``KafkaError`` with Kafka's code:

- topic name: INVALID_TOPIC_EXCEPTION when empty, "." or "..", longer than 249 characters,
  or containing a character outside ``[a-zA-Z0-9._-]``; also when it differs from an
  existing topic only by '.' vs '_' (metric names would collide).
- counts: INVALID_PARTITIONS for ``num_partitions <= 0`` (other than -1 = default) or above
  the controller's limit; INVALID_REPLICATION_FACTOR for ``replication_factor <= 0`` or more
  than the number of live brokers.
- explicit assignments: INVALID_REQUEST when counts are given too; INVALID_REPLICA_ASSIGNMENT
  for non-consecutive partition ids, empty or duplicate replica lists, unknown brokers, or
  replication factors that differ between partitions.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

from protocol.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    if not isinstance(name, str) or name == "":
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"topic name: {name}",
        )
    if not _LEGAL.match(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'",
        )


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


class CollisionIndex:
    """Topic names by their '.'/'_'-unified form: Kafka's collision check in O(1) per name
    instead of a scan of every topic (only names holding '.' or '_' can collide)."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._by_key: dict[str, set[str]] = {}
        self._names: set[str] = set()
        for n in names:
            self.add(n)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def add(self, name: str) -> None:
        self._names.add(name)
        if "." in name or "_" in name:
            self._by_key.setdefault(unify_collision_chars(name), set()).add(name)

    def discard(self, name: str) -> None:
        self._names.discard(name)
        key = unify_collision_chars(name)
        names = self._by_key.get(key)
        if names is not None:
            names.discard(name)
            if not names:
                del self._by_key[key]

    def check(self, name: str) -> None:
        """INVALID_TOPIC_EXCEPTION if ``name`` equals an indexed topic up to '.'/'_'."""
        if "." not in name and "_" not in name:
            return
        clashes = sorted(self._by_key.get(unify_collision_chars(name), set()) - {name})
        if clashes:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topics: {', '.join(clashes)}",
            )


def check_collision(name: str, existing: Iterable[str]) -> None:
    """INVALID_TOPIC_EXCEPTION if ``name`` equals an existing topic up to '.'/'_'."""
    if "." not in name and "_" not in name:
        return
    key = unify_collision_chars(name)
    clashes = sorted(t for t in existing if t != name and unify_collision_chars(t) == key)
    if clashes:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topics: {', '.join(clashes)}",
        )


def check_counts(num_partitions: int, replication_factor: int, live_brokers: int,
                 max_partitions: int) -> None:
    if num_partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if num_partitions > max_partitions:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions {num_partitions} is above this controller's limit "
            f"of {max_partitions}.",
        )
    if replication_factor <= 0:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
        )
    if replication_factor > live_brokers:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{live_brokers}.",
        )


def check_replicas(partition: int, replicas: list[int], live_brokers: Collection[int]) -> None:
    if not replicas:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Replica assignment for partition {partition} is empty.",
        )
    if len(set(replicas)) != len(replicas):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, replicas))} "
            f"for partition id {partition}.",
        )
    unknown = sorted(set(replicas) - set(live_brokers))
    if unknown:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.",
        )


def check_assignment(
    assignment: Mapping[int, list[int]], first_partition: int, live_brokers: Collection[int],
    expected_rf: int | None = None,
) -> int:
    """Validate an explicit assignment for partitions ``first_partition..``; returns the
    replication factor."""
    if not assignment:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Replica assignment is empty.")
    ids = sorted(assignment)
    if ids != list(range(first_partition, first_partition + len(ids))):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Partitions should be a consecutive 0-based integer sequence, given: {ids}",
        )
    rf = expected_rf
    for p in ids:
        replicas = list(assignment[p])
        check_replicas(p, replicas, live_brokers)
        if rf is None:
            rf = len(replicas)
        elif len(replicas) != rf:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Inconsistent replication factor between partitions, partition {ids[0]} has "
                f"{rf} while partition {p} has {len(replicas)}.",
            )
    return rf or 0
