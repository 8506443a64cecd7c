"""`ReplicaFetcherManager`: which ReplicaFetcher copies which partition (Kafka's
AbstractFetcherManager / ReplicaFetcherManager).

Fetchers are keyed by (leader broker id, fetcher id); a partition goes to fetcher
`abs(31 * java_hash(topic) + partition) % num.replica.fetchers` of its leader, as Kafka hashes
them, so with the default single fetcher every partition led by one broker shares one
connection and one Fetch request. The leader's address is looked up (inter-broker listener,
metadata cache) each time a fetcher connects, so a leader restarting on another port is found
again. `num.replica.fetchers` may change at run time (`resize`): partitions are re-hashed.
Fetchers left without partitions are shut down (`shutdown_idle_fetchers`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from broker.replication.fetcher import FetcherConfig, InitialFetchState, ReplicaFetcher
from coordinator.keys import java_string_hashcode

__all__ = ["ReplicaFetcherManager", "fetcher_id_for"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def fetcher_id_for(topic: str, partition: int, num_fetchers: int) -> int:
    """Kafka's getFetcherId: Utils.abs(31 * topic.hashCode + partition) % numFetchers."""
    h = (31 * java_string_hashcode(topic) + partition) & 0xFFFFFFFF
    h = h - (1 << 32) if h & 0x80000000 else h
    return (h & 0x7FFFFFFF if h == -(1 << 31) else abs(h)) % max(num_fetchers, 1)


#: partitions named in one "added / removed fetcher" log line (the rest are counted): a
#: failover's LeaderAndIsr moves tens of thousands at once
LOG_LISTED = 100


def _listing(names) -> str:
    shown = list(itertools.islice(names, LOG_LISTED + 1))
    if len(shown) <= LOG_LISTED:
        return ", ".join(shown)
    return ", ".join(shown[:LOG_LISTED]) + ", ..."


def _remove_from(fetcher: ReplicaFetcher, tps) -> dict:
    """Remove from `fetcher` those of `tps` (a set or dict) it fetches: the intersection is
    taken in C, so a fetcher holding none of them costs nothing per partition."""
    hit = fetcher.partitions.keys() & tps
    return fetcher.remove_partitions(hit) if hit else {}


class ReplicaFetcherManager:
    """`endpoint_of(broker_id)` -> (host, port) or None; `replica_manager` as for
    ReplicaFetcher; `quota` the follower quota or None."""

    def __init__(self, replica_manager, config: FetcherConfig, num_fetchers: int,
                 endpoint_of: Callable[[int], tuple[str, int] | None], quota=None) -> None:
        self.rm = replica_manager
        self.config = config
        self.num_fetchers = max(num_fetchers, 1)
        self.endpoint_of = endpoint_of
        self.quota = quota
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._shutdown = False

    def fetcher_for(self, tp: TopicPartition) -> ReplicaFetcher | None:
        for f in self.fetchers.values():
            if tp in f.partitions:
                return f
        return None

    def fetch_state(self, tp: TopicPartition):
        f = self.fetcher_for(tp)
        return f.partitions.get(tp) if f is not None else None

    def add_fetcher_for_partitions(self, initial: dict[TopicPartition, InitialFetchState]
                                   ) -> None:
        """Start fetching each partition from its leader (Kafka's addFetcherForPartitions);
        a partition already fetched from another leader moves. Linear in the partitions:
        one group per (leader, fetcher id), each fetcher changed once."""
        if self._shutdown:
            return
        groups: dict[tuple[int, int], dict] = {}
        num = self.num_fetchers
        for tp, init in initial.items():
            key = (init.leader_id, 0 if num == 1 else fetcher_id_for(tp[0], tp[1], num))
            group = groups.get(key)
            if group is None:
                group = groups[key] = {}
            group[tp] = init
        for key, parts in groups.items():
            for other_key, f in self.fetchers.items():
                if other_key != key:
                    _remove_from(f, parts)
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                leader_id, fetcher_id = key
                fetcher = ReplicaFetcher(
                    f"ReplicaFetcherThread-{fetcher_id}-{leader_id}", fetcher_id, leader_id,
                    self.rm, self.config, lambda b=leader_id: self.endpoint_of(b), self.quota)
                self.fetchers[key] = fetcher
                fetcher.start()
            fetcher.add_partitions(parts)
            log.info("added fetcher to broker %d for %d partitions: %s", key[0], len(parts),
                     _listing(f"{t}-{p} at {i.init_offset} (epoch {i.current_leader_epoch})"
                              for (t, p), i in parts.items()))

    def remove_fetcher_for_partitions(self, tps) -> dict:
        """Stop fetching these partitions; returns their last fetch states."""
        tps = tps if isinstance(tps, (set, dict)) else set(tps)
        removed = {}
        for f in self.fetchers.values():
            removed.update(_remove_from(f, tps))
        if removed:
            log.info("removed fetcher for %d partitions: %s", len(removed),
                     _listing(f"{t}-{p}" for t, p in removed))
        return removed

    async def shutdown_idle_fetchers(self) -> None:
        for key in [k for k, f in self.fetchers.items() if not f.partitions]:
            await self.fetchers.pop(key).shutdown()

    async def resize(self, num_fetchers: int) -> None:
        """num.replica.fetchers changed: re-hash every partition onto the new fetcher set."""
        num_fetchers = max(num_fetchers, 1)
        if num_fetchers == self.num_fetchers:
            return
        states = {}
        for f in self.fetchers.values():
            for tp, st in f.partitions.items():
                states[tp] = InitialFetchState(st.topic_id, f.leader_id, st.current_leader_epoch,
                                               st.fetch_offset)
        self.num_fetchers = num_fetchers
        for f in list(self.fetchers.values()):
            f.remove_partitions(list(f.partitions))
        self.add_fetcher_for_partitions(states)
        await self.shutdown_idle_fetchers()

    async def shutdown(self) -> None:
        self._shutdown = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        for f in fetchers:
            await f.shutdown()
