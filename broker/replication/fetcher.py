"""`ReplicaFetcher`: one asyncio task copying partitions from one leader broker (Kafka's
AbstractFetcherThread + ReplicaFetcherThread + RemoteLeaderEndPoint).

Each loop round (`do_work`): truncate the partitions in the TRUNCATING state, then send one
Fetch for the partitions ready to fetch and process its answer. Per partition the fetcher
keeps a `PartitionFetchState`: fetch offset (= the local LEO once fetching), the leader epoch
it fetches under, TRUNCATING / FETCHING, the epoch of the last batch fetched, the lag, and a
back-off deadline after an error.

Reconciling logs after a leader change (KIP-101, KIP-279, KIP-595):
- With truncation on fetch (the default; `inter.broker.protocol.version` >= 2.7 and a leader
  answering Fetch v12+), a partition with a known latest epoch starts FETCHING from its LEO and
  sends `last_fetched_epoch`; a leader whose epoch history disagrees answers a diverging epoch
  (epoch, end offset) and the follower truncates to min(that end offset, its own end offset
  for that epoch) before fetching again.
- Otherwise (or with an empty epoch cache) the partition starts TRUNCATING: it sends
  OffsetsForLeaderEpoch with its latest epoch and truncates as Kafka's
  getOffsetTruncationState does (repeating when the leader names an epoch the follower does
  not know); a log without epochs truncates to its high watermark.
Truncation never goes below what both logs agree on, so a follower restarting with a stale HW
keeps its acknowledged records (KIP-101).

Fetch answers (Kafka's processFetchRequest): records are appended unchanged
(`Partition.append_records_as_follower`, a trailing partial batch dropped), then the HW
(min(leader HW, LEO)) and log start offset are taken from the leader. OFFSET_OUT_OF_RANGE:
ask the leader's LEO (ListOffsets latest as a replica): truncate to it when it is below ours
(unclean election), else restart at max(our LEO, the leader's log start), emptying the log
when it is entirely below the leader's start. FENCED_LEADER_EPOCH: the partition leaves this
fetcher until the next LeaderAndIsr (if the epoch sent is still current). Other errors
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, a lost connection)
back the partition off for `replica.fetch.backoff.ms`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import uuid
from collections.abc import Callable

from broker.metrics import TOPIC_STATS
from broker.replication.batched_log import BatchedLog
from broker.replication.fetch_session_handler import (
    FetchRequestData,
    FetchSessionHandler,
    PartitionSpec,
)
from broker.replication.fetch_state import (
    FETCHING,
    TRUNCATING,
    UNDEFINED_EPOCH,
    InitialFetchState,
    PartitionFetchState,
)
from broker.replication.fetcher_truncation import FetcherTruncation
from client.aio_connection import BrokerConnection, BrokerConnectionError
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import FetchRequest

__all__ = ["ReplicaFetcher", "PartitionFetchState", "InitialFetchState", "FetcherConfig",
           "TRUNCATING", "FETCHING", "complete_batches_length"]

log = logging.getLogger(__name__)
#: "marked as failed" lines: a controlled shutdown fences every partition its broker led
failed_log = BatchedLog(log)

FETCH = 1
ZERO_UUID = uuid.UUID(int=0)
SWEEP_S = 30.0  # how often the session's log start offsets are compared with the logs
_BATCH_PREFIX = struct.Struct(">qi")  # base offset, batch length (bytes after this field)

TopicPartition = tuple[str, int]


def complete_batches_length(buf) -> int:
    """Bytes of `buf` made of whole record batches (a fetch may end inside a batch)."""
    pos, n = 0, len(buf)
    while pos + _BATCH_PREFIX.size <= n:
        _, length = _BATCH_PREFIX.unpack_from(buf, pos)
        end = pos + _BATCH_PREFIX.size + length
        if length < 0 or end > n:
            break
        pos = end
    return pos


@dataclasses.dataclass(slots=True)
class FetcherConfig:
    """The replica.* broker keys (Kafka names in comments); times in ms, sizes in bytes."""

    broker_id: int
    fetch_max_bytes: int = 1048576              # replica.fetch.max.bytes (per partition)
    fetch_response_max_bytes: int = 10485760    # replica.fetch.response.max.bytes
    fetch_wait_max_ms: int = 500                # replica.fetch.wait.max.ms
    fetch_min_bytes: int = 1                    # replica.fetch.min.bytes
    fetch_backoff_ms: int = 1000                # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30000              # replica.socket.timeout.ms
    socket_receive_buffer_bytes: int = 65536    # replica.socket.receive.buffer.bytes
    truncate_on_fetch: bool = True              # inter.broker.protocol.version >= 2.7
    rack: str = ""                              # broker.rack (sent as rack_id)
    #: ``opener_for(host, port)`` -> BrokerConnection opener for TLS/SASL inter-broker
    #: listeners (broker.security.inter_broker.opener_for), None = plain TCP
    opener_for: Callable | None = None


class ReplicaFetcher(FetcherTruncation):
    """See the module docstring. `replica_manager` gives `get_partition(topic, p)`,
    `broker_epoch()`, `on_follower_progress(tp, hw_moved)`; `endpoint()` returns the
    leader's (host, port) or None (unknown yet); `quota` is the follower
    ReplicationQuotaManager or None."""

    def __init__(self, name: str, fetcher_id: int, leader_id: int, replica_manager,
                 config: FetcherConfig, endpoint: Callable[[], tuple[str, int] | None],
                 quota=None) -> None:
        self.name = name
        self.fetcher_id = fetcher_id
        self.leader_id = leader_id
        self.rm = replica_manager
        self.config = config
        self.endpoint = endpoint
        self.quota = quota
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self.failed: set[TopicPartition] = set()
        self.truncate_on_fetch = config.truncate_on_fetch
        self._conn: BrokerConnection | None = None
        self._conn_address: tuple[str, int] | None = None
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self.fetches = 0
        self.bytes_fetched = 0
        # KIP-227 (issue 21): the session with the leader, and what the next fetch must look
        # at: partitions whose fetch state may have changed, those truncating, those backing
        # off (until when), those without a topic id (no Fetch v13+)
        self.session = FetchSessionHandler(leader_id)
        self._changed: set[TopicPartition] = set()
        self._truncating: set[TopicPartition] = set()
        self._delayed: dict[TopicPartition, float] = {}
        self._no_topic_id: set[TopicPartition] = set()
        self._swept = 0.0
        self._swept_stamp = None
        self._fetch_version: int | None = None  # of the current connection

    def __repr__(self) -> str:
        return f"ReplicaFetcher({self.name}, partitions={len(self.partitions)})"

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def shutdown(self) -> None:
        self._stopping = True
        self._wakeup.set()
        task, self._task = self._task, None
        if task is not None:
            while not task.done():  # see AlterPartitionManager.shutdown
                task.cancel()
                await asyncio.wait({task}, timeout=1)
        await self._close()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    def _new_connection(self, host: str, port: int) -> BrokerConnection:
        cfg = self.config
        return BrokerConnection(
            host, port, f"broker-{cfg.broker_id}-fetcher-{self.fetcher_id}",
            timeout_s=cfg.socket_timeout_ms / 1000,
            max_response_bytes=max(cfg.fetch_response_max_bytes, cfg.fetch_max_bytes) + (1 << 20),
            receive_buffer_bytes=cfg.socket_receive_buffer_bytes,
            opener=cfg.opener_for(host, port) if cfg.opener_for is not None else None)

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self.do_work()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a fetcher must survive anything
                log.exception("%s: unexpected error; backing off", self.name)
                await self._close()
                await asyncio.sleep(self.config.fetch_backoff_ms / 1000)

    # --- partitions (every change goes through _put / _drop / _delay: the session sees it) --
    def add_partitions(self, initial: dict[TopicPartition, InitialFetchState]) -> None:
        """Start (or keep, when the leader epoch is unchanged) fetching these partitions."""
        for tp, init in initial.items():
            self.failed.discard(tp)
            current = self.partitions.get(tp)
            if current is not None and current.current_leader_epoch == init.current_leader_epoch:
                continue
            latest = self._latest_epoch(tp)
            if self.truncate_on_fetch and latest >= 0:
                state = PartitionFetchState(init.topic_id, init.init_offset,
                                            init.current_leader_epoch, FETCHING, latest)
            else:
                state = PartitionFetchState(init.topic_id, init.init_offset,
                                            init.current_leader_epoch, TRUNCATING)
            self._put(tp, state)
        self._wakeup.set()

    def remove_partitions(self, tps) -> dict[TopicPartition, PartitionFetchState]:
        removed = {}
        for tp in tps:
            st = self._drop(tp)
            if st is not None:
                removed[tp] = st
        return removed

    def _put(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        """Set (and move to the end) the state of `tp`."""
        self.partitions.pop(tp, None)
        self.partitions[tp] = state
        self._changed.add(tp)
        if state.state == TRUNCATING:
            self._truncating.add(tp)
        else:
            self._truncating.discard(tp)
        if state.topic_id is None or state.topic_id == ZERO_UUID:
            self._no_topic_id.add(tp)
        else:
            self._no_topic_id.discard(tp)
        if state.delay_until:
            self._delayed[tp] = state.delay_until

    _update = _put

    def _drop(self, tp: TopicPartition) -> PartitionFetchState | None:
        st = self.partitions.pop(tp, None)
        if st is not None:
            self._changed.add(tp)
            self._truncating.discard(tp)
            self._no_topic_id.discard(tp)
            self._delayed.pop(tp, None)
        return st

    def _delay(self, tps, now: float | None = None) -> None:
        if not tps:
            return
        clock = asyncio.get_running_loop().time()
        until = (clock if now is None else now) + self.config.fetch_backoff_ms / 1000
        for tp in tps:
            st = self.partitions.get(tp)
            if st is not None and st.delay_until <= clock:  # not resting already
                st.delay_until = until
                self._delayed[tp] = until
                self._changed.add(tp)

    def _mark_failed(self, tp: TopicPartition, why: str = "") -> None:
        self.failed.add(tp)
        self._drop(tp)
        failed_log.add(f"{self.name}: marked as failed", f"{self.name}: partition "
                       f"{tp[0]}-{tp[1]} marked as failed{why}", logging.WARNING)

    def _latest_epoch(self, tp: TopicPartition) -> int:
        part = self.rm.get_partition(*tp)
        return part.log.leader_epoch_cache.latest_epoch if part is not None else UNDEFINED_EPOCH

    # --- the loop ------------------------------------------------------------------------------
    async def do_work(self) -> None:
        """One round: connect if needed, truncate, fetch (Kafka's doWork)."""
        if not self.partitions:
            await self._wait(self.config.fetch_backoff_ms)
            return
        if not await self._ensure_connected():
            # the whole fetcher rests fetch_backoff_ms (Kafka delays every partition of a
            # failed fetch by as much): no per-partition marks, which cost a pass over tens
            # of thousands of partitions per attempt while a leader is down
            await self._wait(self.config.fetch_backoff_ms)
            return
        await self.maybe_truncate()
        await self.maybe_fetch()

    async def _wait(self, ms: float) -> None:
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), ms / 1000)
        except TimeoutError:
            pass

    async def _ensure_connected(self) -> bool:
        address = self.endpoint()
        if address is None:
            log.info("%s: leader %d has no known endpoint yet", self.name, self.leader_id)
            return False
        if self._conn is not None and self._conn.connected and self._conn_address == address:
            return True
        await self._close()
        conn = self._new_connection(*address)
        try:
            await conn.connect()
        except BrokerConnectionError as e:
            log.info("%s: cannot connect to leader %d at %s:%d: %s", self.name, self.leader_id,
                     address[0], address[1], e)
            return False
        self._conn, self._conn_address = conn, address
        self._fetch_version = None
        if self.truncate_on_fetch and conn.versions.get(FETCH, (0, 0))[1] < 12:
            log.info("%s: leader %d lacks Fetch v12; truncating with OffsetsForLeaderEpoch",
                     self.name, self.leader_id)
            self.truncate_on_fetch = False
            for tp, st in list(self.partitions.items()):
                st.state, st.last_fetched_epoch = TRUNCATING, UNDEFINED_EPOCH
                self._put(tp, st)
        return True

    # --- truncation ----------------------------------------------------------------------------
    def _truncate(self, tp: TopicPartition, offset: int) -> bool:
        part = self.rm.get_partition(*tp)
        if part is None:
            self._drop(tp)
            return False
        try:
            if offset < part.high_watermark:
                log.warning("%s: truncating %s-%d to %d below its high watermark %d", self.name,
                            tp[0], tp[1], offset, part.high_watermark)
            part.truncate_to(offset)
        except (KafkaError, OSError) as e:
            if isinstance(e, OSError):  # the log dir goes offline (reported once)
                self.rm.storage_error(tp, "truncation", e)
            else:
                log.error("%s: truncation of %s-%d to %d failed: %s", self.name, tp[0], tp[1],
                          offset, e)
            self._mark_failed(tp)
            return False
        self.rm.on_follower_progress(tp, False)
        return True

    def _finish_truncation(self, tp: TopicPartition, offset: int, completed: bool) -> None:
        st = self.partitions.get(tp)
        if st is None:
            return
        part = self.rm.get_partition(*tp)
        fetch_offset = part.log_end_offset if part is not None else offset
        state = FETCHING if (self.truncate_on_fetch or completed) else TRUNCATING
        self._update(tp, PartitionFetchState(st.topic_id, min(offset, fetch_offset),
                                             st.current_leader_epoch, state,
                                             self._latest_epoch(tp), st.lag, st.delay_until))

    def _on_fenced(self, tp: TopicPartition, request_epoch: int) -> bool:
        """FENCED_LEADER_EPOCH: True to retry later (our epoch moved on meanwhile)."""
        st = self.partitions.get(tp)
        if st is None:
            return False
        if st.current_leader_epoch == request_epoch:
            self._mark_failed(tp, f" (its epoch {request_epoch} is older than the leader's; "
                                  "awaiting the new LeaderAndIsr)")
            return False
        return True

    # --- fetch -------------------------------------------------------------------------------------
    def _spec_for(self, tp: TopicPartition, now: float, throttle: bool) -> PartitionSpec | None:
        """What the fetch says about `tp` now, or None when it is not to be fetched."""
        st = self.partitions.get(tp)
        if st is None or st.state != FETCHING or st.delay_until > now:
            return None
        if throttle and not st.in_sync and self.quota.is_throttled(*tp):
            return None
        part = self.rm.get_partition(*tp)
        if part is None:
            return None
        return PartitionSpec(st.topic_id, st.fetch_offset, part.log_start_offset,
                             self.config.fetch_max_bytes, st.current_leader_epoch,
                             st.last_fetched_epoch if self.truncate_on_fetch else -1)

    def _changed_since_last_fetch(self, now: float, throttle: bool) -> set[TopicPartition]:
        """The partitions whose spec may differ from the session's (see `build_fetch`)."""
        changed, self._changed = self._changed, set()
        delayed = self._delayed
        if delayed:
            for tp, until in list(delayed.items()):
                if until <= now:
                    del delayed[tp]
                    changed.add(tp)
        quota = self.quota
        if throttle or (quota is not None and quota.throttles_any()):
            changed.update(self.partitions)  # a throttle comes and goes with the rate
        elif now - self._swept >= SWEEP_S:  # the follower's log start moves with retention
            self._swept = now
            stamp = self.rm.replica_change_stamp()  # put while no log start offset moved
            if stamp != self._swept_stamp:  # (nor any log or Partition came or went)
                self._swept_stamp = stamp
                get = self.rm.partitions.get  # dict reads: tens of thousands per sweep
                for tp, spec in self.session.partitions.items():
                    part = get(tp)
                    if part is None or part.log.log_start_offset != spec.log_start_offset:
                        changed.add(tp)
        return changed

    def build_fetch(self) -> tuple[FetchRequest, int, FetchRequestData] | None:
        """The next Fetch (None when there is nothing to fetch or forget): (request,
        version, data); `data.session` holds every partition the answer may carry.

        With a leader answering Fetch v7+ the fetch is part of a KIP-227 session: a full
        fetch lists every ready partition, an incremental one only those whose offset, log
        start, epochs or topic id changed since the last fetch, and forgets those no longer
        ready (backing off, truncating, throttled, removed). The partitions looked at are the
        ones changed since the last fetch, those whose back-off ended, those whose log start
        offset moved (compared every `SWEEP_S`, 30 s: the follower's retention moves it), and
        every partition while a replication throttle applies."""
        cfg = self.config
        conn = self._conn
        if conn is None:
            return None
        version = self._fetch_version
        if version is None:  # once per connection
            version = self._fetch_version = conn.version_for(
                FETCH, max_version=None if self.truncate_on_fetch else 11)
        if version >= 13 and self._no_topic_id:
            version = 12
        now = asyncio.get_running_loop().time()
        quota = self.quota
        throttle = quota is not None and quota.is_quota_exceeded()
        changed = self._changed_since_last_fetch(now, throttle)
        data = self.session.build(changed, lambda tp: self._spec_for(tp, now, throttle),
                                  lambda: list(self.partitions), version >= 13, version >= 7)
        if not data.session and not data.to_forget:
            return None
        use_ids = version >= 13
        by_topic: dict[str, list] = {}
        ids: dict[str, uuid.UUID] = {}
        for (topic, p), spec in data.to_send.items():
            by_topic.setdefault(topic, []).append(FetchRequest.FetchPartition(
                partition=p, current_leader_epoch=spec.current_leader_epoch,
                fetch_offset=spec.fetch_offset, last_fetched_epoch=spec.last_fetched_epoch,
                log_start_offset=spec.log_start_offset, partition_max_bytes=spec.max_bytes))
            ids[topic] = spec.topic_id or ZERO_UUID
        forgotten: dict[str, list[int]] = {}
        for topic, p in data.to_forget:
            forgotten.setdefault(topic, []).append(p)
            ids.setdefault(topic, self.session.topic_ids.get(topic, ZERO_UUID))
        req = FetchRequest(
            replica_id=cfg.broker_id,
            replica_state=FetchRequest.ReplicaState(replica_id=cfg.broker_id,
                                                    replica_epoch=self.rm.broker_epoch()),
            max_wait_ms=cfg.fetch_wait_max_ms, min_bytes=cfg.fetch_min_bytes,
            max_bytes=cfg.fetch_response_max_bytes, isolation_level=0,
            session_id=data.session_id, session_epoch=data.session_epoch,
            topics=[FetchRequest.FetchTopic(topic=t, topic_id=ids[t] if use_ids else ZERO_UUID,
                                            partitions=ps) for t, ps in by_topic.items()],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(
                topic=t, topic_id=ids[t] if use_ids else ZERO_UUID, partitions=ps)
                for t, ps in forgotten.items()],
            rack_id=cfg.rack)
        return req, version, data

    async def maybe_fetch(self) -> None:
        built = self.build_fetch()
        if built is None:
            await self._wait(self.config.fetch_backoff_ms if not self._any_ready_soon()
                             else 10)
            return
        req, version, data = built
        timeout = (self.config.socket_timeout_ms + self.config.fetch_wait_max_ms) / 1000
        try:
            _, resp = await self._conn.request(FETCH, req, version, timeout_s=timeout)
        except BrokerConnectionError as e:
            if not self._stopping:
                log.info("%s: fetch from leader %d failed: %s", self.name, self.leader_id, e)
            self.session.handle_error()
            await self._close()
            self._delay(list(data.session))
            return
        self.fetches += 1
        await self.process_fetch_response(resp, version, data)

    def _any_ready_soon(self) -> bool:
        now = asyncio.get_running_loop().time()
        return any(until - now < 0.01 for until in self._delayed.values())

    async def process_fetch_response(self, resp, version: int, data: FetchRequestData) -> None:
        errors: list[TopicPartition] = []
        sent = data.session
        names = self.session.topic_names
        answered = []
        for t in resp.responses:
            topic = names.get(t.topic_id) if version >= 13 else t.topic
            for pd in t.partitions:
                answered.append(((topic, pd.partition_index), pd))
        if not self.session.handle_response(resp.error_code, resp.session_id,
                                            (tp for tp, _ in answered), data.full):
            if resp.error_code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                   ErrorCode.INVALID_FETCH_SESSION_EPOCH):
                log.info("%s: fetch session %d of leader %d: %s; starting a new one", self.name,
                         data.session_id, self.leader_id, ErrorCode(resp.error_code).name)
                return  # the next fetch is a full one, at once
            log.info("%s: fetch answered with error %d%s", self.name, resp.error_code,
                     "" if resp.error_code else " (partitions outside the session)")
            self._delay(list(sent))
            return
        diverging: dict[TopicPartition, tuple[int, int]] = {}
        out_of_range: list[TopicPartition] = []
        for tp, pd in answered:
            st = self.partitions.get(tp)
            spec = sent.get(tp)
            if st is None or spec is None or st.fetch_offset != spec.fetch_offset or \
                    st.state != FETCHING or st.current_leader_epoch != spec.current_leader_epoch:
                continue
            self._changed.add(tp)  # its offsets or log start may move below
            code = pd.error_code
            if code == ErrorCode.NONE:
                de = pd.diverging_epoch
                if self.truncate_on_fetch and de is not None and \
                        (de.epoch != -1 or de.end_offset != -1):
                    diverging[tp] = (de.epoch, de.end_offset)
                elif not self._process_partition_data(tp, st, pd):
                    errors.append(tp)
            elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                out_of_range.append(tp)
            elif code == ErrorCode.FENCED_LEADER_EPOCH:
                if self._on_fenced(tp, spec.current_leader_epoch):
                    errors.append(tp)
            else:
                if code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                ErrorCode.UNKNOWN_LEADER_EPOCH):
                    log.info("%s: fetch of %s-%d answered error %d", self.name, tp[0],
                             tp[1], code)
                errors.append(tp)
        for tp, (epoch, end) in diverging.items():
            st = self.partitions.get(tp)
            if st is None:
                continue
            offset, done = self._offset_truncation_state(tp, st, epoch, end)
            log.info("%s: %s-%d diverges from the leader at epoch %d (ends at %d): "
                     "truncating to %d", self.name, tp[0], tp[1], epoch, end, offset)
            if self._truncate(tp, offset):
                self._finish_truncation(tp, offset, done)
        for tp in out_of_range:
            if not await self._handle_out_of_range(tp):
                errors.append(tp)
        self._delay(errors)

    def _process_partition_data(self, tp: TopicPartition, st: PartitionFetchState, pd) -> bool:
        """Append the leader's batches and take its HW / log start (Kafka's
        processPartitionData). False -> back off the partition."""
        part = self.rm.get_partition(*tp)
        if part is None or part.is_leader:
            self._drop(tp)
            return True
        records = pd.records or b""
        usable = complete_batches_length(records)
        if usable != len(records):
            records = records[:usable]
        try:
            if st.fetch_offset != part.log_end_offset:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"offset mismatch: fetched {st.fetch_offset}, log end "
                                 f"{part.log_end_offset}")
            info = part.append_records_as_follower(records) if usable else None
            hw_moved = part.update_follower_high_watermark(pd.high_watermark)
            if pd.log_start_offset >= 0:
                part.maybe_increment_log_start_offset(pd.log_start_offset)
        except KafkaError as e:
            if e.code == ErrorCode.CORRUPT_MESSAGE:
                log.error("%s: invalid records for %s-%d at offset %d: %s", self.name, tp[0],
                          tp[1], st.fetch_offset, e)
                return False
            log.error("%s: follower append to %s-%d failed: %s", self.name, tp[0], tp[1], e)
            self._mark_failed(tp)
            return True
        except OSError as e:  # the log dir goes offline (reported once)
            self.rm.storage_error(tp, "follower append", e)
            self._mark_failed(tp)
            return True
        valid = info.valid_bytes if info is not None else 0
        next_offset = info.last_offset + 1 if valid else st.fetch_offset
        lag = max(0, pd.high_watermark - next_offset)
        if valid:  # in place: the session compares what the next fetch says with what it sent
            st.fetch_offset = next_offset
            st.last_fetched_epoch = part.log.leader_epoch_cache.latest_epoch
            self._changed.add(tp)
        st.lag = lag
        if valid:
            self.bytes_fetched += valid
            TOPIC_STATS.record_replication_in(valid)
            if self.quota is not None and self.quota.is_throttled(*tp):
                self.quota.record(valid)
        self.rm.on_follower_progress(tp, hw_moved)
        return True
