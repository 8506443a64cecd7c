"""Exactly-once streaming output: one Kafka transaction per micro-batch and task (KIP-98).

A streaming write task of micro-batch ``B`` (Spark's ``streaming.sql.batchId`` task
property) and input partition ``P`` writes with ``transactional.id = <prefix>-<P>``:

1. ``init_transactions()``: InitProducerId bumps the producer epoch, which fences every
   earlier producer with this id (a previous attempt, a task of the run before a crash) and
   finishes its open transaction: aborted if it was never committed.
2. The group ``<prefix>-<P>`` records, inside each committed transaction, the next batch to
   write as a committed offset of partition 0 of the first row's topic
   (``sendOffsetsToTransaction``, KIP-447: read back with OffsetFetch ``require_stable``).
   If it is already past ``B``, this task's output of ``B`` was committed before (the query
   died after the commit but before Spark logged the batch as done): the task writes
   nothing.
3. Otherwise: begin, produce every row, send the offset ``B + 1``, commit.

So a replayed micro-batch (Spark re-runs the last planned batch after a restart, with the
same offsets) writes each task's rows once; read_committed consumers never see records of
aborted attempts. This needs what Spark's exactly-once sinks always need: a deterministic
query (the same batch gives the same rows to the same task partition). The output of one
micro-batch becomes visible task by task, not all at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from connectors.spark.client import librdkafka_config
from connectors.spark.options import KafkaOptionError, SinkOptions

TXN_TIMEOUT_S = 120.0
"""Seconds for each transactional call (init, commit, offsets)."""
TRANSACTION_TIMEOUT_MS = "300000"
"""``transaction.timeout.ms`` unless set: a task may take up to 5 minutes for its batch."""


def task_identity() -> tuple[int, int]:
    """(micro-batch id, partition id) of the running Spark write task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    batch = context.getLocalProperty("streaming.sql.batchId") if context else None
    if batch is None:
        raise RuntimeError("exactly-once writes run in streaming write tasks only")
    return int(batch), context.partitionId()


def produce_transactionally(options: SinkOptions, batches: Iterator[pa.RecordBatch],
                            batch_id: int, partition: int, producer_config: dict,
                            produce_batches) -> tuple[int, bool]:
    """Write ``batches`` as task ``partition`` of micro-batch ``batch_id`` in one
    transaction (see the module doc). Returns (records written, skipped because already
    committed). ``producer_config`` is the sink's librdkafka producer config;
    ``produce_batches(producer, batches) -> count`` produces the rows."""
    if not options.transactional_id_prefix:
        raise KafkaOptionError(
            "exactly-once streaming writes need the query's checkpointLocation option or a "
            "kafka.transactional.id prefix; set exactlyOnce=false for at-least-once")
    batches = iter(batches)
    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return 0, False
    txn_id = f"{options.transactional_id_prefix}-{partition}"
    marker = TopicPartition(options.topic or _first_topic(first), 0)
    producer = Producer({**producer_config, "transactional.id": txn_id,
                         "transaction.timeout.ms": options.client_config.get(
                             "transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)})
    consumer_conf = {k: v for k, v in librdkafka_config(options.client_config, "consumer")
                     .items() if not k.startswith(("linger.", "batch.", "transaction"))}
    consumer = Consumer({**consumer_conf, "group.id": txn_id,
                         "isolation.level": "read_committed"})
    try:
        _call(producer.init_transactions, TXN_TIMEOUT_S)
        done = consumer.committed([marker], timeout=TXN_TIMEOUT_S)[0].offset
        if done > batch_id:
            return 0, True
        producer.begin_transaction()
        try:
            count = produce_batches(producer, chain([first], batches))
            _call(producer.send_offsets_to_transaction,
                  [TopicPartition(marker.topic, 0, batch_id + 1)],
                  consumer.consumer_group_metadata(), TXN_TIMEOUT_S)
            _call(producer.commit_transaction, TXN_TIMEOUT_S)
        except BaseException:
            try:
                producer.abort_transaction(TXN_TIMEOUT_S)
            except KafkaException:
                pass  # fenced or gone: the coordinator aborts it (epoch bump or timeout)
            raise
        return count, False
    finally:
        consumer.close()


def _first_topic(batch: pa.RecordBatch) -> str:
    names = [n.lower() for n in batch.schema.names]
    topic = batch.column(names.index("topic"))[0].as_py() if "topic" in names else None
    if not topic:
        raise KafkaOptionError("a row has a null 'topic' and no 'topic' option is set")
    return topic


def _call(method, *args):
    try:
        return method(*args)
    except KafkaException as exc:
        err = exc.args[0]
        raise RuntimeError(f"transaction step {method.__name__} failed: {err.str()}"
                           + (" (fenced by a newer attempt)" if err.fatal() else "")) from None
