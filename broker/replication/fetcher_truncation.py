"""The replica fetcher's log reconciliation (a mixin of `broker.replication.fetcher.ReplicaFetcher`,
Kafka's AbstractFetcherThread truncation and out-of-range handling).

- `maybe_truncate`: partitions in the TRUNCATING state ask the leader where their latest
  epoch ends (OffsetsForLeaderEpoch) and truncate as Kafka's getOffsetTruncationState does
  (repeating when the leader names an epoch the follower does not know); a log without
  epochs truncates to its high watermark.
- `_offset_truncation_state`: the offset to truncate to after a diverging epoch (Fetch v12+)
  or an OffsetsForLeaderEpoch answer, never below what both logs agree on (KIP-101/279).
- `_handle_out_of_range` (Kafka's fetchOffsetAndTruncate): OFFSET_OUT_OF_RANGE asks the
  leader's LEO (ListOffsets latest as a replica): truncate to it when it is below ours
  (unclean election), else restart at max(our LEO, the leader's log start), emptying the
  log when it is entirely below the leader's start.
"""

from __future__ import annotations

import asyncio
import logging

from broker.replication.fetch_state import (
    FETCHING,
    TRUNCATING,
    UNDEFINED_EPOCH,
    PartitionFetchState,
)
from client.aio_connection import BrokerConnectionError
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import ListOffsetsRequest, OffsetForLeaderEpochRequest

__all__ = ["FetcherTruncation"]

log = logging.getLogger("broker.replication.fetcher")

LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = 2, 23

TopicPartition = tuple[str, int]


class FetcherTruncation:
    """Mixed into ReplicaFetcher: uses its partitions, connection and `_truncate`,
    `_finish_truncation`, `_update`, `_delay`, `_on_fenced`, `_close`."""

    async def maybe_truncate(self) -> None:
        if not self._truncating:
            return
        now = asyncio.get_running_loop().time()
        with_epochs: dict[TopicPartition, tuple[int, int]] = {}
        without: list[TopicPartition] = []
        for tp in list(self._truncating):
            st = self.partitions.get(tp)
            if st is None or st.state != TRUNCATING or st.is_delayed(now):
                continue
            latest = self._latest_epoch(tp)
            if latest >= 0 and self._conn.supports(OFFSET_FOR_LEADER_EPOCH):
                with_epochs[tp] = (st.current_leader_epoch, latest)
            else:
                without.append(tp)
        if with_epochs:
            await self._truncate_to_epoch_end_offsets(with_epochs)
        for tp in without:  # no epochs known: Kafka's truncateToHighWatermark
            st = self.partitions.get(tp)
            if st is not None and self._truncate(tp, st.fetch_offset):
                self._finish_truncation(tp, st.fetch_offset, True)

    async def _truncate_to_epoch_end_offsets(self, requested: dict[TopicPartition, tuple[int, int]]
                                             ) -> None:
        topics: dict[str, list] = {}
        for (topic, p), (current, epoch) in requested.items():
            topics.setdefault(topic, []).append(
                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=p, current_leader_epoch=current, leader_epoch=epoch))
        req = OffsetForLeaderEpochRequest(
            replica_id=self.config.broker_id,
            topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps)
                    for t, ps in topics.items()])
        try:
            _, resp = await self._conn.request(OFFSET_FOR_LEADER_EPOCH, req)
        except BrokerConnectionError as e:
            log.info("%s: OffsetsForLeaderEpoch failed: %s", self.name, e)
            await self._close()
            self._delay(requested)
            return
        errors = []
        for t in resp.topics:
            for p in t.partitions:
                tp = (t.topic, p.partition)
                st = self.partitions.get(tp)
                sent = requested.get(tp)
                if st is None or sent is None or st.current_leader_epoch != sent[0] or \
                        st.state != TRUNCATING:
                    continue  # removed or re-added while waiting
                if p.error_code == ErrorCode.NONE:
                    offset, done = self._offset_truncation_state(tp, st, p.leader_epoch,
                                                                 p.end_offset)
                    log.info("%s: truncating %s-%d to %d (leader epoch %d ends at %d)",
                             self.name, tp[0], tp[1], offset, p.leader_epoch, p.end_offset)
                    if self._truncate(tp, offset):
                        self._finish_truncation(tp, offset, done)
                elif p.error_code == ErrorCode.FENCED_LEADER_EPOCH:
                    if self._on_fenced(tp, sent[0]):
                        errors.append(tp)
                else:
                    log.info("%s: OffsetsForLeaderEpoch for %s-%d: error %d; retrying",
                             self.name, tp[0], tp[1], p.error_code)
                    errors.append(tp)
        self._delay(errors)

    def _offset_truncation_state(self, tp: TopicPartition, st: PartitionFetchState,
                                 leader_epoch: int, leader_end: int) -> tuple[int, bool]:
        """Kafka's getOffsetTruncationState: (offset to truncate to, truncation complete)."""
        part = self.rm.get_partition(*tp)
        leo = part.log.log_end_offset
        if leader_end < 0:
            return st.fetch_offset, True  # the leader cannot place us: our initial offset (HW)
        if leader_epoch == UNDEFINED_EPOCH:
            return min(leader_end, leo), True
        local_epoch, local_end = part.log.leader_epoch_cache.end_offset_for_epoch(
            leader_epoch, leo)
        if local_end < 0:
            return min(leader_end, leo), True  # we track no epoch that old: the leader's end
        if local_epoch != leader_epoch:
            return min(local_end, leo), False  # truncate to our end of an older epoch, ask again
        return min(local_end, leader_end, leo), True

    async def _handle_out_of_range(self, tp: TopicPartition) -> bool:
        """Kafka's fetchOffsetAndTruncate: True when the partition has a new fetch offset
        (or was fenced and removed)."""
        st = self.partitions.get(tp)
        part = self.rm.get_partition(*tp)
        if st is None or part is None:
            return True
        try:
            leader_end = await self._leader_offset(tp, st.current_leader_epoch, -1)
            leo = part.log_end_offset
            if leader_end < leo:
                log.warning("%s: resetting %s-%d from %d to the leader's end offset %d",
                            self.name, tp[0], tp[1], leo, leader_end)
                if not self._truncate(tp, leader_end):
                    return True
                self._update(tp, PartitionFetchState(st.topic_id, leader_end,
                                                     st.current_leader_epoch, FETCHING,
                                                     self._latest_epoch(tp), 0))
                return True
            leader_start = await self._leader_offset(tp, st.current_leader_epoch, -2)
            if leader_start > leo:
                log.warning("%s: %s-%d ends at %d below the leader's start %d: emptying it",
                            self.name, tp[0], tp[1], leo, leader_start)
                part.truncate_fully_and_start_at(leader_start)
                self.rm.on_follower_progress(tp, False)
            offset = max(leader_start, leo)
            self._update(tp, PartitionFetchState(st.topic_id, offset, st.current_leader_epoch,
                                                 FETCHING, self._latest_epoch(tp),
                                                 leader_end - offset))
            return True
        except KafkaError as e:
            if e.code == ErrorCode.FENCED_LEADER_EPOCH:
                return not self._on_fenced(tp, st.current_leader_epoch)
            log.info("%s: cannot get offsets of %s-%d from the leader: %s", self.name, tp[0],
                     tp[1], e)
            return False
        except BrokerConnectionError as e:
            log.info("%s: ListOffsets failed: %s", self.name, e)
            await self._close()
            return False

    async def _leader_offset(self, tp: TopicPartition, leader_epoch: int, timestamp: int) -> int:
        """The leader's LEO (-1) or log start (-2), asked as a replica (ListOffsets)."""
        req = ListOffsetsRequest(
            replica_id=self.config.broker_id, isolation_level=0,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=tp[0], partitions=[
                ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=tp[1], current_leader_epoch=leader_epoch,
                    timestamp=timestamp, max_num_offsets=1)])])
        version = self._conn.version_for(LIST_OFFSETS, min_version=1)
        _, resp = await self._conn.request(LIST_OFFSETS, req, version)
        p = resp.topics[0].partitions[0]
        if p.error_code != ErrorCode.NONE:
            raise KafkaError(p.error_code, f"ListOffsets {tp[0]}-{tp[1]}: error {p.error_code}")
        return p.offset
