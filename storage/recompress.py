"""Broker-side recompression for the topic config ``compression.type`` (Kafka docs "Topic
Configs": ``producer`` keeps the producer's codec; ``uncompressed``, ``gzip``, ``snappy``,
``lz4`` or ``zstd`` make the broker store batches in that codec).

Called by ``Log.append_as_leader`` after validation and before offsets are assigned: only
batches whose codec differs from the topic's are rebuilt (records, timestamps, headers,
producer id/epoch/base sequence, transactional flag and timestamp type kept); batches that
already match, control batches and ``producer`` topics pass through untouched, so the common
case copies nothing (Kafka's LogValidator recompresses in the same cases).
"""

from __future__ import annotations

from protocol.record_builder import RecordBatchBuilder
from protocol.records import RecordBatch, iter_batches

#: compression.type value -> RecordBatch codec id; "producer" is absent (no recompression).
TOPIC_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def target_codec(compression_type: str) -> int | None:
    """The codec id the topic demands, or None for ``producer``."""
    return TOPIC_CODECS.get(compression_type)


def recompress(buf, batches: list[RecordBatch], codec: int | None
               ) -> tuple[bytearray, list[RecordBatch]] | None:
    """A new buffer with every non-control batch in ``codec``, and its batch views; None
    when nothing needs to change. Raises CorruptRecordError for undecodable records."""
    if codec is None or all(b.is_control or b.compression_type == codec for b in batches):
        return None
    out = bytearray()
    for b in batches:
        if b.is_control or b.compression_type == codec:
            out += bytes(b.buffer)
            continue
        builder = RecordBatchBuilder(
            compression_type=codec, producer_id=b.producer_id, producer_epoch=b.producer_epoch,
            base_sequence=b.base_sequence, is_transactional=b.is_transactional,
            base_offset=b.base_offset, partition_leader_epoch=b.partition_leader_epoch,
            timestamp_type=b.timestamp_type)
        for r in b.iter_records():
            builder.append(r.timestamp, r.key, r.value, r.headers or ())
        out += builder.build()
    return out, list(iter_batches(out))
