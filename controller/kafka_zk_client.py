"""KafkaZkClient: Kafka's znode operations over :class:`controller.zk_client.ZkClient`.

Every znode is read and written through its codec in :mod:`controller.zk_data`. Malformed
znode data is logged with the path and skipped (the znode is treated as absent), never raised
to the caller.

Controller writes are fenced (Kafka's ``wrapRequestWithControllerEpochCheck``): each write is
sent in a ZooKeeper ``multi`` that starts with ``check(/controller_epoch, epochZkVersion)``.
If the check fails, another controller has been elected since and
:class:`ControllerMovedError` is raised, so a deposed controller (paused, then resumed) can
write nothing. Many partition-state writes go as multis of up to :data:`BATCH` writes behind
one check (one round trip instead of one per partition); a multi that fails on one write is
replayed one write per multi to find which (Kafka sends one multi per write). Methods taking ``ezv`` (the controller epoch znode version) are fenced that
way; ``ezv = -1`` means unfenced (admin writes from any broker, as Kafka's AdminZkClient).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from common.loop_slice import gather_staggered
from controller import zk_data as zd
from controller.zk_client import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SetDataOp,
    ZkClient,
    ZkOp,
)

__all__ = ["ControllerMovedError", "KafkaZkClient", "TopicPartition", "UpdateLeaderAndIsrResult",
           "lost_controllership"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
State = zd.LeaderIsrAndControllerEpoch
#: writes per fenced multi when many partitions change at once (1,000 state writes of topics
#: with 249-character names stay under ZooKeeper's 1 MB jute.maxbuffer; fewer, larger
#: multis cut kazoo's per-request cost: a 100,000-partition failover writes 100,000 states)
BATCH = 1000
READ_CHUNK = 500  # partition states per multiRead (decoded as each arrives)


class ControllerMovedError(Exception):
    """The controller epoch znode changed: this broker is no longer the controller."""


#: how long past ``zookeeper.session.timeout.ms`` a restarted broker waits for the
#: registration of its previous (crashed) session to expire: ZooKeeper checks expiry once per
#: tick, and the old session may have negotiated a longer timeout
STALE_REGISTRATION_MARGIN_MS = 5000
STALE_REGISTRATION_POLL_S = 0.25


def _same_endpoints(info: zd.BrokerInfo, data: bytes | None) -> bool:
    try:
        other = zd.BrokerIdZNode.decode(info.id, data)
    except zd.ZkDataError:
        return False
    return {(e.host, e.port) for e in other.endpoints} == {(e.host, e.port) for e in info.endpoints}


def lost_controllership(exc: BaseException) -> bool:
    """True when ``exc`` means the write was not made because this broker stopped being
    the controller: the controller-epoch check failed, or the ZooKeeper session that held
    ``/controller`` ended. Controller requests then answer NOT_CONTROLLER, never
    UNKNOWN_SERVER_ERROR."""
    from kazoo.exceptions import ConnectionClosedError, SessionExpiredError

    return isinstance(exc, ControllerMovedError | SessionExpiredError | ConnectionClosedError)


class BrokerIdAlreadyRegisteredError(Exception):
    """``/brokers/ids/<id>`` is held by another live session."""


class UpdateLeaderAndIsrResult:
    """``finished``: tp -> new state (partition epoch = the written znode version) or the
    exception; ``retry``: partitions whose conditional write hit a BADVERSION."""

    def __init__(self) -> None:
        self.finished: dict[TopicPartition, State | Exception] = {}
        self.retry: list[TopicPartition] = []


class KafkaZkClient:
    def __init__(self, zk: ZkClient, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.zk = zk
        self.clock_ms = clock_ms

    # ------------------------------------------------------------------ fencing

    async def _fenced(self, op: ZkOp, ezv: int) -> Any:
        """Apply ``op``; when ``ezv`` >= 0, atomically with the controller epoch check.
        Returns the op's result; raises its kazoo exception or ControllerMovedError."""
        if ezv < 0:
            results = await self.zk.multi([op])
            if isinstance(results[0], Exception):
                raise results[0]
            return results[0]
        results = await self.zk.multi([CheckOp(zd.ControllerEpochZNode.path, ezv), op])
        check, result = results
        if isinstance(check, Exception) and not isinstance(check, RolledBackError):
            raise ControllerMovedError(
                f"Controller epoch zkVersion check fails. Expected zkVersion = {ezv}")
        if isinstance(result, Exception):
            raise result
        return result

    async def _fenced_many(self, ops: list[ZkOp], ezv: int) -> list[Any]:
        """``_fenced`` for each op concurrently; results or exceptions, in order. One failed
        epoch check raises ControllerMovedError."""
        results = await asyncio.gather(*(self._fenced(op, ezv) for op in ops),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, ControllerMovedError):
                raise r
            if isinstance(r, BaseException) and not isinstance(r, Exception):
                raise r
        return list(results)

    async def _fenced_batched(self, ops: list[ZkOp], ezv: int) -> list[Any]:
        """``_fenced_many`` with up to BATCH ops per multi (all-or-nothing per multi; a
        failed multi is replayed op by op so each op gets its own outcome)."""
        if len(ops) <= 1:
            return await self._fenced_many(ops, ezv)
        parts = await asyncio.gather(*(self._fenced_chunk(ops[i:i + BATCH], ezv)
                                       for i in range(0, len(ops), BATCH)))
        return [r for part in parts for r in part]

    async def _fenced_chunk(self, chunk: list[ZkOp], ezv: int) -> list[Any]:
        """Up to BATCH ops in one multi behind the epoch check (see _fenced_batched)."""
        if len(chunk) <= 1:
            return await self._fenced_many(chunk, ezv)
        prefix: list[ZkOp] = [CheckOp(zd.ControllerEpochZNode.path, ezv)] if ezv >= 0 else []
        results = await self.zk.multi(prefix + chunk)
        if prefix and isinstance(results[0], Exception) and \
                not isinstance(results[0], RolledBackError):
            raise ControllerMovedError(
                f"Controller epoch zkVersion check fails. Expected zkVersion = {ezv}")
        body = results[len(prefix):]
        if not any(isinstance(r, Exception) for r in body):
            return body
        return await self._fenced_many(chunk, ezv)

    # ------------------------------------------------------------------ paths and cluster id

    async def create_top_level_paths(self) -> None:
        await asyncio.gather(*(self.zk.ensure_path(p) for p in zd.PERSISTENT_ZK_PATHS))

    async def get_data(self, path: str) -> tuple[bytes | None, Any] | None:
        return await self.zk.get_data(path)

    async def get_cluster_id(self) -> str | None:
        got = await self.zk.get_data(zd.ClusterIdZNode.path)
        if got is None:
            return None
        return zd.ClusterIdZNode.decode(got[0])

    async def create_or_get_cluster_id(self, proposed: str) -> str:
        try:
            await self.zk.create(zd.ClusterIdZNode.path, zd.ClusterIdZNode.encode(proposed),
                                 make_parents=True)
            return proposed
        except NodeExistsError:
            cid = await self.get_cluster_id()
            if cid is None:
                raise RuntimeError("Failed to get cluster id from Zookeeper. This can happen if "
                                   "/cluster/id is deleted from Zookeeper.") from None
            return cid

    async def generate_broker_sequence_id(self) -> int:
        """The new version of ``/brokers/seqid`` (1, 2, ...), Kafka's broker id generator."""
        while True:
            try:
                stat = await self.zk.set_data(zd.BrokerSequenceIdZNode.path, b"", -1)
                return stat.version
            except NoNodeError:
                await self.zk.ensure_path(zd.BrokerSequenceIdZNode.path)

    # ------------------------------------------------------------------ brokers

    async def register_broker(self, info: zd.BrokerInfo) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; returns the broker epoch (its czxid).

        A registration held by another session is most often this broker's own from before
        a crash (kill -9 and an immediate restart): its session lives on in ZooKeeper until
        ``zookeeper.session.timeout.ms`` passes. The broker waits for it to go (logging once
        why), up to that timeout plus ``STALE_REGISTRATION_MARGIN_MS``, then registers (Kafka
        fails at once with NodeExistsException). Past the wait, a registration with other
        endpoints is a live duplicate broker id: BrokerIdAlreadyRegisteredError with Kafka's
        message; one with this broker's own endpoints (whose listener port this process has
        bound, so its former owner is gone) is deleted and replaced."""
        path = zd.BrokerIdZNode.path(info.id)
        data = zd.BrokerIdZNode.encode(info)
        wait_ms = self.zk.session_timeout_ms + STALE_REGISTRATION_MARGIN_MS
        deadline: float | None = None
        while True:
            try:
                results = await self.zk.multi([CreateOp(path, None, ephemeral=True),
                                               SetDataOp(path, data, 0)])
                if isinstance(results[0], NodeExistsError):
                    raise results[0]
                for r in results:
                    if isinstance(r, Exception):
                        raise r
                stat = results[1]
            except NodeExistsError:
                got = await self.zk.get_data(path)
                if got is None:
                    continue  # went away meanwhile: create again
                old_data, stat = got
                if stat.ephemeralOwner != self.zk.session_id:
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + wait_ms / 1000
                        log.info("%s is still registered by session 0x%x (a previous run of "
                                 "this broker, or another broker with id %d); waiting up to "
                                 "%d ms for that session to expire", path, stat.ephemeralOwner,
                                 info.id, wait_ms)
                    if now < deadline:
                        await asyncio.sleep(STALE_REGISTRATION_POLL_S)
                        continue
                    if not _same_endpoints(info, old_data):
                        raise BrokerIdAlreadyRegisteredError(
                            f"Error while creating ephemeral at {path}, node already exists and "
                            f"owner '0x{stat.ephemeralOwner:x}' does not match current session "
                            f"'0x{self.zk.session_id:x}'") from None
                    log.warning("%s still names this broker's endpoints after %d ms; replacing "
                                "the registration of session 0x%x", path, wait_ms,
                                stat.ephemeralOwner)
                    with contextlib.suppress(NoNodeError, BadVersionError):
                        await self.zk.delete(path, stat.version)
                    continue
            log.info("Registered broker %d at path %s with addresses: %s, czxid (broker epoch): %d",
                     info.id, path, ",".join(e.connection_string() for e in info.endpoints),
                     stat.czxid)
            return stat.czxid

    async def update_broker_info(self, info: zd.BrokerInfo) -> None:
        await self.zk.set_data(zd.BrokerIdZNode.path(info.id), zd.BrokerIdZNode.encode(info))

    async def get_broker(self, broker_id: int) -> tuple[zd.BrokerInfo, int] | None:
        """``(registration, broker epoch)`` or None (absent or malformed: logged)."""
        path = zd.BrokerIdZNode.path(broker_id)
        got = await self.zk.get_data(path)
        if got is None:
            return None
        try:
            return zd.BrokerIdZNode.decode(broker_id, got[0]), got[1].czxid
        except zd.ZkDataError as e:
            log.error("skipping malformed broker registration at %s: %s", path, e)
            return None

    async def get_broker_ids(self) -> list[int]:
        out = []
        for child in await self.zk.get_children(zd.BrokerIdsZNode.path) or []:
            try:
                out.append(int(child))
            except ValueError:
                log.error("skipping znode %s/%s: not a broker id", zd.BrokerIdsZNode.path, child)
        return sorted(out)

    async def get_all_brokers_and_epochs(self) -> dict[int, tuple[zd.BrokerInfo, int]]:
        ids = await self.get_broker_ids()
        got = await asyncio.gather(*(self.get_broker(b) for b in ids))
        return {b: g for b, g in zip(ids, got, strict=True) if g is not None}

    # ------------------------------------------------------------------ controller

    async def get_controller_id(self) -> int | None:
        got = await self.get_controller()
        return None if got is None else got[0]

    async def get_controller(self) -> tuple[int, int] | None:
        """``(controller broker id, ephemeral owner session id)`` of ``/controller``, or
        None (absent or malformed: logged)."""
        got = await self.zk.get_data(zd.ControllerZNode.path)
        if got is None:
            return None
        try:
            return zd.ControllerZNode.decode(got[0]), got[1].ephemeralOwner
        except zd.ZkDataError as e:
            log.error("malformed %s: %s", zd.ControllerZNode.path, e)
            return None

    async def get_controller_epoch(self) -> tuple[int, int] | None:
        """``(epoch, znode version)`` or None."""
        got = await self.zk.get_data(zd.ControllerEpochZNode.path)
        if got is None:
            return None
        return zd.ControllerEpochZNode.decode(got[0]), got[1].version

    async def register_controller_and_increment_controller_epoch(self, broker_id: int
                                                                 ) -> tuple[int, int]:
        """Create ``/controller`` and bump ``/controller_epoch`` in one multi (conditional on
        the epoch's version). Returns ``(new epoch, new epoch znode version)``; raises
        ControllerMovedError when another broker won."""
        current = await self.get_controller_epoch()
        if current is None:
            try:
                await self.zk.create(zd.ControllerEpochZNode.path,
                                     zd.ControllerEpochZNode.encode(0))
                current = (0, 0)
            except NodeExistsError:
                current = await self.get_controller_epoch()
                if current is None:
                    raise ControllerMovedError("controller epoch znode vanished") from None
        epoch, version = current
        new_epoch = epoch + 1
        results = await self.zk.multi([
            CreateOp(zd.ControllerZNode.path,
                     zd.ControllerZNode.encode(broker_id, self.clock_ms()), ephemeral=True),
            SetDataOp(zd.ControllerEpochZNode.path, zd.ControllerEpochZNode.encode(new_epoch),
                      version),
        ])
        if not any(isinstance(r, Exception) for r in results):
            return new_epoch, results[1].version
        if any(isinstance(r, (NodeExistsError, BadVersionError)) for r in results):
            cid = await self.get_controller_id()
            if cid == broker_id:
                again = await self.get_controller_epoch()
                if again is not None and again[0] == new_epoch:
                    return again
            raise ControllerMovedError(
                "Controller moved to another broker. Aborting controller startup procedure")
        raise next(r for r in results if isinstance(r, Exception) and
                   not isinstance(r, RolledBackError))

    async def delete_controller(self, ezv: int) -> None:
        try:
            await self._fenced(DeleteOp(zd.ControllerZNode.path), ezv)
        except NoNodeError:
            pass

    # ------------------------------------------------------------------ topics

    async def get_all_topics(self) -> set[str]:
        return set(await self.zk.get_children(zd.TopicsZNode.path) or [])

    async def get_topic_assignment(self, topic: str) -> tuple[zd.TopicAssignment, int] | None:
        """``(assignment, znode version)``, None when absent or malformed (logged)."""
        path = zd.TopicZNode.path(topic)
        got = await self.zk.get_data(path)
        if got is None:
            return None
        try:
            return zd.TopicZNode.decode(topic, got[0]), got[1].version
        except zd.ZkDataError as e:
            log.error("skipping malformed topic znode %s: %s", path, e)
            return None

    async def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, zd.TopicAssignment]:
        """Every topic's assignment, read pipelined (absent or malformed ones left out)."""
        names = list(topics)
        got = await self.zk.get_data_many([zd.TopicZNode.path(t) for t in names])
        out = {}
        for t, g in zip(names, got, strict=True):
            if g is None:
                continue
            try:
                out[t] = zd.TopicZNode.decode(t, g[0])
            except zd.ZkDataError as e:
                log.error("skipping malformed topic znode %s: %s", zd.TopicZNode.path(t), e)
        return out

    async def set_topic_assignment(self, topic: str, topic_id: uuid.UUID | None,
                                   partitions: dict[int, zd.ReplicaAssignment], ezv: int = -1,
                                   expected_version: int = -1) -> None:
        data = zd.TopicZNode.encode(zd.TopicAssignment(topic_id, partitions))
        await self._fenced(SetDataOp(zd.TopicZNode.path(topic), data, expected_version), ezv)

    async def create_topic_assignment(self, topic: str, topic_id: uuid.UUID,
                                      partitions: dict[int, zd.ReplicaAssignment]) -> None:
        """AdminZkClient's write of a new topic (raises NodeExistsError)."""
        await self.zk.create(zd.TopicZNode.path(topic),
                             zd.TopicZNode.encode(zd.TopicAssignment(topic_id, partitions)),
                             make_parents=True)

    async def get_partition_state(self, tp: TopicPartition) -> State | None:
        path = zd.TopicPartitionStateZNode.path(*tp)
        got = await self.zk.get_data(path)
        if got is None:
            return None
        try:
            return zd.TopicPartitionStateZNode.decode(got[0], got[1].version)
        except zd.ZkDataError as e:
            log.error("skipping malformed partition state %s: %s", path, e)
            return None

    async def get_partition_states(self, tps: Iterable[TopicPartition]
                                   ) -> dict[TopicPartition, State]:
        """The states of ``tps``, read pipelined (Kafka's getTopicPartitionStates; absent or
        malformed ones left out), each multiRead decoded while ZooKeeper answers the next."""
        items = list(tps)
        path_of, decode = zd.TopicPartitionStateZNode.path, zd.TopicPartitionStateZNode.decode

        async def read(chunk: list[TopicPartition]) -> dict[TopicPartition, State]:
            paths = [path_of(*tp) for tp in chunk]
            part = {}
            for tp, path, g in zip(chunk, paths, await self.zk.get_data_many(paths),
                                   strict=True):
                if g is None:
                    continue
                try:
                    part[tp] = decode(g[0], g[1].version)
                except zd.ZkDataError as e:
                    log.error("skipping malformed partition state %s: %s", path, e)
            return part
        out: dict[TopicPartition, State] = {}
        for part in await asyncio.gather(*(read(items[i:i + READ_CHUNK])
                                           for i in range(0, len(items), READ_CHUNK))):
            out.update(part)
        return out

    async def create_partition_states(self, states: dict[TopicPartition, State], ezv: int
                                      ) -> dict[TopicPartition, Exception | None]:
        """Create ``.../partitions``, ``.../partitions/<p>`` and ``.../state`` (fenced);
        tp -> None on success or the exception (NodeExistsError for the state znode)."""
        topics = {t for t, _ in states}
        await self._create_ignoring_existing(
            [CreateOp(zd.TopicPartitionsZNode.path(t)) for t in topics], ezv)
        await self._create_ignoring_existing(
            [CreateOp(zd.TopicPartitionZNode.path(*tp)) for tp in states], ezv)
        items = list(states.items())
        results = await self._fenced_batched(
            [CreateOp(zd.TopicPartitionStateZNode.path(*tp), zd.TopicPartitionStateZNode.encode(s))
             for tp, s in items], ezv)
        return {tp: (r if isinstance(r, Exception) else None)
                for (tp, _), r in zip(items, results, strict=True)}

    async def _create_ignoring_existing(self, ops: list[CreateOp], ezv: int) -> None:
        for r in await self._fenced_batched(ops, ezv):
            if isinstance(r, Exception) and not isinstance(r, NodeExistsError):
                raise r

    async def update_leader_and_isr(self, states: dict[TopicPartition, State], ezv: int
                                    ) -> UpdateLeaderAndIsrResult:
        """Conditionally write each new state: the expected znode version is the state's
        ``partition_epoch`` (the version it was read at). A success returns the state with
        the new version as its partition epoch; BADVERSION goes to ``retry``. Each multi's
        writes are built when its task runs: ZooKeeper works on one while the next is built."""
        out = UpdateLeaderAndIsrResult()
        items = list(states.items())
        path, encode = zd.TopicPartitionStateZNode.path, zd.TopicPartitionStateZNode.encode

        async def write(chunk: list) -> UpdateLeaderAndIsrResult:  # built when its task runs
            results = await self._fenced_chunk(
                [SetDataOp(path(*tp), encode(s), s.partition_epoch) for tp, s in chunk], ezv)
            part = UpdateLeaderAndIsrResult()
            for (tp, s), r in zip(chunk, results, strict=True):
                if isinstance(r, BadVersionError):
                    part.retry.append(tp)
                else:
                    part.finished[tp] = r if isinstance(r, Exception) else _with_epoch(s, r.version)
            return part
        for part in await gather_staggered(write(items[i:i + BATCH])
                                           for i in range(0, len(items), BATCH)):
            out.finished.update(part.finished)  # in the order asked
            out.retry.extend(part.retry)
        return out

    async def delete_topic(self, topic: str, ezv: int) -> None:
        """Delete ``/brokers/topics/<t>`` (recursively), its config and its deletion marker,
        every delete fenced (Kafka's deleteTopicZNode + deleteTopicConfigs +
        deleteTopicDeletions)."""
        await self.delete_recursive(zd.TopicZNode.path(topic), ezv)
        await self._delete_if_exists(zd.ConfigEntityZNode.path("topics", topic), ezv)
        await self._delete_if_exists(zd.DeleteTopicsTopicZNode.path(topic), ezv)

    async def delete_recursive(self, path: str, ezv: int) -> None:
        children = await self.zk.get_children(path)
        if children is None:
            return
        await asyncio.gather(*(self.delete_recursive(f"{path}/{c}", ezv) for c in children))
        try:
            await self._fenced(DeleteOp(path), ezv)
        except NoNodeError:
            pass
        except NotEmptyError:
            await self.delete_recursive(path, ezv)

    async def _delete_if_exists(self, path: str, ezv: int) -> None:
        try:
            await self._fenced(DeleteOp(path), ezv)
        except NoNodeError:
            pass

    async def get_topic_deletions(self) -> list[str]:
        return sorted(await self.zk.get_children(zd.DeleteTopicsZNode.path) or [])

    async def delete_topic_deletions(self, topics: Iterable[str], ezv: int) -> None:
        for t in topics:
            await self._delete_if_exists(zd.DeleteTopicsTopicZNode.path(t), ezv)

    async def create_delete_topic_path(self, topic: str) -> None:
        try:
            await self.zk.create(zd.DeleteTopicsTopicZNode.path(topic), make_parents=True)
        except NodeExistsError:
            pass

    async def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return await self.zk.exists(zd.DeleteTopicsTopicZNode.path(topic)) is not None

    # ------------------------------------------------------------------ admin znodes

    async def get_partition_reassignment(self) -> dict[TopicPartition, list[int]]:
        got = await self.zk.get_data(zd.ReassignPartitionsZNode.path)
        if got is None:
            return {}
        try:
            return zd.ReassignPartitionsZNode.decode(got[0])
        except zd.ZkDataError as e:
            log.error("ignoring malformed %s: %s", zd.ReassignPartitionsZNode.path, e)
            return {}

    async def reassign_partitions_in_progress(self) -> bool:
        return await self.zk.exists(zd.ReassignPartitionsZNode.path) is not None

    async def set_or_create_partition_reassignment(
            self, reassignment: dict[TopicPartition, list[int]], ezv: int) -> None:
        data = zd.ReassignPartitionsZNode.encode(reassignment)
        try:
            await self._fenced(SetDataOp(zd.ReassignPartitionsZNode.path, data), ezv)
        except NoNodeError:
            await self._fenced(CreateOp(zd.ReassignPartitionsZNode.path, data), ezv)

    async def create_partition_reassignment(self, reassignment: dict[TopicPartition, list[int]]
                                            ) -> None:
        """Raises NodeExistsError when a reassignment is already in progress."""
        await self.zk.create(zd.ReassignPartitionsZNode.path,
                             zd.ReassignPartitionsZNode.encode(reassignment), make_parents=True)

    async def delete_partition_reassignment(self, ezv: int) -> None:
        await self._delete_if_exists(zd.ReassignPartitionsZNode.path, ezv)

    async def get_preferred_replica_election(self) -> set[TopicPartition]:
        got = await self.zk.get_data(zd.PreferredReplicaElectionZNode.path)
        if got is None:
            return set()
        try:
            return set(zd.PreferredReplicaElectionZNode.decode(got[0]))
        except zd.ZkDataError as e:
            log.error("ignoring malformed %s: %s", zd.PreferredReplicaElectionZNode.path, e)
            return set()

    async def create_preferred_replica_election(self, partitions: Iterable[TopicPartition]) -> None:
        await self.zk.create(zd.PreferredReplicaElectionZNode.path,
                             zd.PreferredReplicaElectionZNode.encode(sorted(partitions)),
                             make_parents=True)

    async def delete_preferred_replica_election(self, ezv: int) -> None:
        await self._delete_if_exists(zd.PreferredReplicaElectionZNode.path, ezv)

    async def get_isr_change_notifications(self) -> list[str]:
        return sorted(await self.zk.get_children(zd.IsrChangeNotificationZNode.path) or [])

    async def get_partitions_from_isr_change_notifications(self, names: Iterable[str]
                                                           ) -> list[TopicPartition]:
        decoded = await self._read_notifications(
            zd.IsrChangeNotificationZNode.path, names, zd.IsrChangeNotificationSequenceZNode.decode)
        return sorted({tp for tps in decoded for tp in tps})

    async def delete_isr_change_notifications(self, names: Iterable[str], ezv: int) -> None:
        await self._delete_notifications(zd.IsrChangeNotificationZNode.path, names, ezv)

    async def propagate_log_dir_event(self, broker_id: int) -> str:
        """A broker's log dir failed (KIP-112): a new sequential notification for the
        controller. Returns its path."""
        return await self.zk.create(zd.LogDirEventNotificationSequenceZNode.create_path,
                                    zd.LogDirEventNotificationSequenceZNode.encode(broker_id),
                                    sequential=True, make_parents=True)

    async def get_log_dir_event_notifications(self) -> list[str]:
        return sorted(await self.zk.get_children(zd.LogDirEventNotificationZNode.path) or [])

    async def get_broker_ids_from_log_dir_events(self, names: Iterable[str]) -> list[int]:
        return sorted(set(await self._read_notifications(
            zd.LogDirEventNotificationZNode.path, names,
            zd.LogDirEventNotificationSequenceZNode.decode)))

    async def delete_log_dir_event_notifications(self, names: Iterable[str], ezv: int) -> None:
        await self._delete_notifications(zd.LogDirEventNotificationZNode.path, names, ezv)

    async def _read_notifications(self, parent: str, names: Iterable[str],
                                  decode: Callable[[bytes | None], Any]) -> list[Any]:
        """The decoded notifications ``parent/<name>``; gone ones are skipped, malformed ones
        logged and skipped."""
        out = []
        for name in names:
            path = f"{parent}/{name}"
            got = await self.zk.get_data(path)
            if got is None:
                continue
            try:
                out.append(decode(got[0]))
            except zd.ZkDataError as e:
                log.error("skipping malformed %s: %s", path, e)
        return out

    async def _delete_notifications(self, parent: str, names: Iterable[str], ezv: int) -> None:
        await self._fenced_many([DeleteOp(f"{parent}/{n}") for n in names], ezv)

    async def delete_all_children(self, path: str, ezv: int) -> None:
        """Delete every child of ``path`` (fenced), e.g. stale notifications on failover."""
        children = await self.zk.get_children(path) or []
        await self._fenced_many([DeleteOp(f"{path}/{c}") for c in children], ezv)

    # ------------------------------------------------------------------ configs

    async def get_entity_configs(self, entity_type: str, name: str) -> dict[str, str]:
        """The overrides of ``/config/<type>/<name>`` ({} when absent or malformed)."""
        return (await self.get_entity_configs_many(entity_type, [name]))[name]

    async def get_entity_configs_many(self, entity_type: str, names: Iterable[str]
                                      ) -> dict[str, dict[str, str]]:
        """``get_entity_configs`` for many entities, read pipelined (multiRead)."""
        names = list(names)
        paths = [zd.ConfigEntityZNode.path(entity_type, n) for n in names]
        got = await self.zk.get_data_many(paths) if len(paths) > 1 else \
            [await self.zk.get_data(p) for p in paths]
        out: dict[str, dict[str, str]] = {}
        for name, path, g in zip(names, paths, got, strict=True):
            out[name] = {}
            if g is None:
                continue
            try:
                out[name] = zd.ConfigEntityZNode.decode(g[0])
            except zd.ZkDataError as e:
                log.error("ignoring malformed config znode %s: %s", path, e)
        return out

    async def get_all_entities_with_config(self, entity_type: str) -> list[str]:
        return sorted(await self.zk.get_children(zd.ConfigEntityTypeZNode.path(entity_type)) or [])

    async def set_or_create_entity_configs(self, entity_type: str, name: str,
                                           configs: dict[str, str]) -> None:
        path = zd.ConfigEntityZNode.path(entity_type, name)
        data = zd.ConfigEntityZNode.encode(configs)
        try:
            await self.zk.set_data(path, data)
        except NoNodeError:
            try:
                await self.zk.create(path, data, make_parents=True)
            except NodeExistsError:
                await self.zk.set_data(path, data)

    async def create_config_change_notification(self, entity_path: str) -> str:
        """``/config/changes/config_change_<seq>`` announcing ``entity_path``
        (``topics/<t>``, ``brokers/<id>``, ``users/<u>``, ...)."""
        await self.zk.ensure_path(zd.ConfigEntityChangeNotificationZNode.path)
        return await self.zk.create(
            zd.ConfigEntityChangeNotificationSequenceZNode.create_path,
            zd.ConfigEntityChangeNotificationSequenceZNode.encode(entity_path), sequential=True)

    # ------------------------------------------------------------------ producer ids

    async def new_producer_id_block(self, broker_id: int, size: int) -> zd.ProducerIdBlock:
        """Reserve the block after ``/latest_producer_id_block`` with a conditional write
        (Kafka's ZkProducerIdManager.getNewProducerIdBlock): concurrent brokers never get
        the same ids; a lost race reads again."""
        path = zd.ProducerIdBlockZNode.path
        while True:
            got = await self.zk.get_data(path)
            if got is None:
                await self.zk.ensure_path(path)
                continue
            data, stat = got
            start = 0
            if data:
                try:
                    start = zd.ProducerIdBlockZNode.decode(data).block_end + 1
                except zd.ZkDataError as e:
                    raise RuntimeError(f"malformed {path}: {e}") from None
            if start > (1 << 63) - 1 - size:
                raise RuntimeError("Exhausted all producer ids")
            block = zd.ProducerIdBlock(broker_id, start, start + size - 1)
            try:
                await self.zk.set_data(path, zd.ProducerIdBlockZNode.encode(block), stat.version)
                return block
            except BadVersionError:
                continue


def _with_epoch(state: State, version: int) -> State:
    return State(state.leader, state.leader_epoch, state.isr, state.controller_epoch, version,
                 state.leader_recovery_state)
