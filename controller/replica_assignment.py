"""Replica assignment for new topics and partitions: Kafka's ``AdminUtils.assignReplicasToBrokers``.

Goals (as Kafka's): spread replicas evenly over brokers, put a partition's replicas on distinct
brokers, and - when every broker has a rack - on as many distinct racks as possible.

Rack-unaware (brokers in the given order, callers pass them sorted by id): the first replica
of partition ``p`` is ``brokers[(p + startIndex) % n]``; the others follow at a shift that
grows by one each time ``p`` wraps around the broker list
(``replica_index(first, shift, j, n) = (first + 1 + (shift + j) % (n - 1)) % n``).

Rack-aware: the same walk over the *rack-alternated* broker list (racks sorted by name,
brokers sorted by id within a rack, then taken one per rack in turn: racks a,b,c holding
0,1,2 / 3,4,5 / 6,7,8 give ``0,3,6,1,4,7,2,5,8``), with the shift multiplied by the number of
racks, skipping a broker whose rack already holds a replica while some rack holds none, and a
broker already used while some broker is unused.

``startIndex`` and the initial shift are random unless ``fixed_start_index`` >= 0 (both take
that value, which makes assignments reproducible in tests); ``rng`` may be seeded.
Errors are KafkaErrors: INVALID_PARTITIONS (count <= 0), INVALID_REPLICATION_FACTOR (<= 0 or
more than the brokers), INVALID_REPLICA_ASSIGNMENT (some but not all brokers have a rack
under the enforced rack-aware mode).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

from protocol.errors import ErrorCode, KafkaError

__all__ = ["RACK_AWARE_DISABLED", "RACK_AWARE_ENFORCED", "RACK_AWARE_SAFE",
           "assign_replicas_to_brokers", "broker_metadatas", "rack_alternated_broker_list",
           "replica_index"]

# kafka.admin.RackAwareMode
RACK_AWARE_ENFORCED, RACK_AWARE_SAFE, RACK_AWARE_DISABLED = "Enforced", "Safe", "Disabled"


def replica_index(first_replica_index: int, second_replica_shift: int, replica: int,
                  n_brokers: int) -> int:
    shift = 1 + (second_replica_shift + replica) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def rack_alternated_broker_list(broker_rack: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack in turn (racks sorted, brokers sorted within a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in broker_rack.items():
        by_rack.setdefault(rack, []).append(broker)
    iters = {rack: iter(sorted(ids)) for rack, ids in by_rack.items()}
    racks = sorted(iters)
    out: list[int] = []
    i = 0
    while len(out) < len(broker_rack):
        nxt = next(iters[racks[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(racks)
    return out


def broker_metadatas(brokers: Iterable[tuple[int, str | None]],
                     mode: str = RACK_AWARE_ENFORCED) -> list[tuple[int, str | None]]:
    """Kafka's ``AdminZkClient.getBrokerMetadatas``: ``(id, rack)`` sorted by id; racks
    dropped when ``mode`` is Disabled, or Safe and some broker has none; Enforced with some
    but not all racks set -> INVALID_REPLICA_ASSIGNMENT."""
    items = sorted(brokers)
    with_rack = [b for b in items if b[1] is not None]
    if mode == RACK_AWARE_ENFORCED and with_rack and len(with_rack) < len(items):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "Not all brokers have rack information. Add --disable-rack-aware in "
                         "command line to make replica assignment without rack information.")
    if mode == RACK_AWARE_DISABLED or (mode == RACK_AWARE_SAFE and len(with_rack) < len(items)):
        return [(b, None) for b, _ in items]
    return items


def assign_replicas_to_brokers(brokers: Iterable[tuple[int, str | None]], n_partitions: int,
                               replication_factor: int, fixed_start_index: int = -1,
                               start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """``{partition: [broker, ...]}`` for ``n_partitions`` partitions numbered from
    ``max(0, start_partition_id)``. ``brokers`` are ``(id, rack | None)`` in the order to
    use (Kafka passes them sorted by id)."""
    metas = list(brokers)
    if n_partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                         "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         "Replication factor must be larger than 0.")
    if replication_factor > len(metas):
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {replication_factor} larger than available "
                         f"brokers: {len(metas)}.")
    rng = rng or random.Random()
    if all(rack is None for _, rack in metas):
        return _rack_unaware(n_partitions, replication_factor, [b for b, _ in metas],
                             fixed_start_index, start_partition_id, rng)
    racks = {}
    for b, rack in metas:
        if rack is None:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Not all brokers have rack "
                             "information for replica rack aware assignment.")
        racks[b] = rack
    return _rack_aware(n_partitions, replication_factor, racks, fixed_start_index,
                       start_partition_id, rng)


def _rack_unaware(n_partitions: int, rf: int, broker_list: list[int], fixed_start_index: int,
                  start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    n = len(broker_list)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    current = max(0, start_partition_id)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start_index) % n
        replicas = [broker_list[first]]
        replicas += [broker_list[replica_index(first, shift, j, n)] for j in range(rf - 1)]
        out[current] = replicas
        current += 1
    return out


def _rack_aware(n_partitions: int, rf: int, broker_rack: dict[int, str], fixed_start_index: int,
                start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    num_racks = len(set(broker_rack.values()))
    arranged = rack_alternated_broker_list(broker_rack)
    n = len(arranged)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    current = max(0, start_partition_id)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {broker_rack[leader]}
        brokers_used = {leader}
        k = 0
        for _j in range(rf - 1):
            while True:
                broker = arranged[replica_index(first, shift * num_racks, k, n)]
                rack = broker_rack[broker]
                k += 1
                if (rack not in racks_used or len(racks_used) == num_racks) and \
                        (broker not in brokers_used or len(brokers_used) == n):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[current] = replicas
        current += 1
    return out
