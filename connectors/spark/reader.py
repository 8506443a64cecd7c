"""Batch and streaming readers: plan offset ranges on the driver, fetch them on executors.

Stream offsets (what Spark checkpoints in ``offsets/<batchId>``) are JSON
``{"topic": {"partition": nextOffset}}``, the layout of Spark's Kafka source, so a restarted
query resumes exactly at the next unread offset of every partition. Each micro-batch plans
one input partition per topic-partition with offsets to read; executors fetch them in
parallel (:mod:`connectors.spark.fetch`). Partitions that appear later (more partitions, or
new topics matching ``subscribePattern``) are read from their log start offset.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from connectors.spark.client import (
    ClusterView,
    KafkaDataLossError,
    UnknownTopicPartitionError,
)
from connectors.spark.options import (
    EARLIEST,
    LATEST,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
)
from connectors.spark.planning import (
    TP,
    OffsetRange,
    flatten,
    nest,
    plan_ranges,
    rate_limit,
    split_ranges,
)


class KafkaInputPartition(InputPartition):
    """One Spark task: the offsets [from_offset, until_offset) of one topic-partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng


class _RangeReading:
    """Shared by both readers: driver-side cluster view, executor-side ``read``."""

    options: SourceOptions
    _view: ClusterView | None = None

    @property
    def view(self) -> ClusterView:
        if self._view is None:
            self._view = ClusterView(self.options.client_config)
        return self._view

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_view"] = None  # the admin client stays on the driver
        return state

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaInputPartition):
            return  # nothing planned: PySpark reads one placeholder InputPartition(None)
        from connectors.spark.fetch import read_range  # executors only: numpy, protocol

        opts = self.options
        yield from read_range(opts.client_config, partition.range, opts.include_headers,
                              opts.fail_on_data_loss, opts.poll_timeout_ms)

    def _resolve(self, spec: dict[str, dict[int, int]] | int, tps: list[TP], name: str,
                 default: int) -> dict[TP, int]:
        """Turn a startingOffsets/endingOffsets spec into real offsets for ``tps``.

        Keywords apply to every partition; JSON gives partitions it names their offset
        (-2/-1 resolved to earliest/latest) and the others ``default``. Partitions named in
        JSON must exist (:class:`UnknownTopicPartitionError` otherwise).
        """
        wanted = {tp: spec for tp in tps} if isinstance(spec, int) else {
            tp: flatten(spec).get(tp, default) for tp in tps}
        if not isinstance(spec, int):
            _check_named(flatten(spec), tps, name)
        resolved = {tp: o for tp, o in wanted.items() if o >= 0}
        for sentinel in (EARLIEST, LATEST):
            need = [tp for tp, o in wanted.items() if o == sentinel]
            resolved.update(self.view.offsets(need, sentinel))
        return resolved

    def _start(self, tps: list[TP], default: int) -> dict[TP, int]:
        """Starting offsets: startingTimestamp, else startingOffsetsByTimestamp (partitions
        it does not name follow startingOffsets), else startingOffsets."""
        opts = self.options
        offsets = self._resolve(opts.starting_offsets, tps, "startingOffsets", default)
        return self._by_timestamp(opts.starting_timestamps, tps, offsets, starting=True)

    def _end(self, tps: list[TP]) -> dict[TP, int]:
        opts = self.options
        offsets = self._resolve(opts.ending_offsets, tps, "endingOffsets", LATEST)
        return self._by_timestamp(opts.ending_timestamps, tps, offsets, starting=False)

    def _by_timestamp(self, spec, tps: list[TP], offsets: dict[TP, int],
                      starting: bool) -> dict[TP, int]:
        """``offsets`` with the partitions ``spec`` names replaced by their offset for that
        timestamp. No record at or after it: an ending offset is the end offset, a starting
        one fails (strategy ``error``) or is the end offset (strategy ``latest``)."""
        if spec is None:
            return offsets
        which = "starting" if starting else "ending"
        if isinstance(spec, int):
            wanted = {tp: spec for tp in tps}
        else:
            wanted = flatten(spec)
            _check_named(wanted, tps, f"{which}OffsetsByTimestamp")
        found = self.view.offsets_for_times(wanted)
        missing = [tp for tp, o in found.items() if o < 0]
        if missing and starting and not self.options.no_timestamp_match_latest:
            raise ValueError(
                "no offset matched the starting timestamp for " + ", ".join(
                    f"{t}-{p} (timestamp {wanted[(t, p)]})" for t, p in sorted(missing))
                + "; set startingOffsetsByTimestampStrategy=latest to start at the end")
        latest = self.view.offsets(missing, LATEST)
        return {**offsets, **{tp: (latest[tp] if o < 0 else o) for tp, o in found.items()}}


def _check_named(named: dict[TP, int], tps: list[TP], name: str) -> None:
    missing = sorted(set(named) - set(tps))
    if missing:
        raise UnknownTopicPartitionError(
            f"{name} names partitions that are not subscribed or do not exist: "
            + ", ".join(f"{t}-{p}" for t, p in missing))


class KafkaBatchReader(_RangeReading, DataSourceReader):
    """``spark.read``: the offsets between startingOffsets and endingOffsets, once."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[KafkaInputPartition]:
        opts = self.options
        tps = self.view.selected_partitions(opts.topics)
        start = self._start(tps, EARLIEST)
        end = self._end(tps)
        bad = [tp for tp in tps if start[tp] > end[tp]]
        if bad and opts.fail_on_data_loss:
            raise KafkaDataLossError(
                "startingOffsets is after endingOffsets for "
                + ", ".join(f"{t}-{p} ({start[(t, p)]} > {end[(t, p)]})" for t, p in bad))
        ranges = split_ranges(plan_ranges(start, end), opts.min_partitions)
        return [KafkaInputPartition(r) for r in ranges]


class KafkaStreamReader(_RangeReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches of per-partition offset ranges."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: dict[TP, int] | None = None

    # -- offsets -----------------------------------------------------------------------
    def initialOffset(self) -> dict:
        """startingOffsets resolved against the cluster (checkpointed as batch 0's start)."""
        tps = self.view.selected_partitions(self.options.topics)
        return offsets_to_json(nest(self._start(tps, LATEST)))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an availableNow run: the end offsets of the partitions now."""
        tps = self.view.selected_partitions(self.options.topics)
        self._target = self.view.offsets(tps, LATEST)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """End offsets for the next micro-batch: the cluster's (or availableNow target's)
        end offsets, new partitions included, capped by ``limit`` (ReadMaxRows)."""
        begin = flatten(offsets_from_json(start))
        if self._target is not None:
            latest = dict(self._target)
        else:
            tps = self.view.selected_partitions(self.options.topics)
            latest = self.view.offsets(tps, LATEST)
        gone = sorted(set(begin) - set(latest))
        if gone and self._target is None:
            self._data_loss("partitions no longer exist: "
                            + ", ".join(f"{t}-{p}" for t, p in gone))
        new = [tp for tp in latest if tp not in begin]
        begin_all = {**self.view.offsets(new, EARLIEST), **begin}
        for tp, until in latest.items():
            if until < begin_all[tp]:
                self._data_loss(f"{tp[0]}-{tp[1]} end offset {until} is before the next offset "
                                f"to read {begin_all[tp]} (log truncated or topic recreated)")
        end = {tp: latest[tp] for tp in latest}
        for tp in gone:  # kept when the availableNow target predates them
            end[tp] = begin[tp]
        if isinstance(limit, ReadMaxRows):
            capped = rate_limit({tp: begin_all[tp] for tp in latest}, latest, limit.max_rows)
            end.update(capped)
        for tp in new:  # an untouched new partition starts where it was found
            end[tp] = max(end[tp], begin_all[tp])
        return offsets_to_json(nest(end))

    def partitions(self, start: dict, end: dict) -> list[KafkaInputPartition]:
        begin = flatten(offsets_from_json(start))
        finish = flatten(offsets_from_json(end))
        new = [tp for tp in finish if tp not in begin]
        begin.update(self.view.offsets(new, EARLIEST))
        ranges = split_ranges(plan_ranges(begin, finish), self.options.min_partitions)
        return [KafkaInputPartition(r) for r in ranges]

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        self._view = None

    def _data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise KafkaDataLossError(
                message + ". Set failOnDataLoss=false to skip lost data and go on.")
