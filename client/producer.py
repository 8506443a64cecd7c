"""The producing side of the tools and the console: Kafka's default partitioner for keyed
records (``murmur2``, ``key_partition``) and ``Sender``, which batches records per
partition (RecordBatch v2, ``compression_type`` as Kafka's ids: 0 none, 1 gzip, 2 snappy,
3 lz4, 4 zstd) and sends Produce requests (v3 to v9) to the partitions' leaders.

``Sender(client, topic, leaders, codec, acks, batch_size)``: ``leaders`` {partition: broker
id}, ``batch_size`` in bytes (a partition's batch is sent once its approximate size reaches
it); ``add(partition, headers, key, value)``; ``flush(partitions=None)``; ``sent`` counts
bytes sent. A Produce refused by a moved leader is resent to the new one
(``AdminRouter.to_leaders``); any other partition error raises ``ToolError`` naming the
partition and the error. acks=0 sends without waiting for an answer. A broker without
Produce v3 -> ``ToolError``.
"""

from __future__ import annotations

import time

from client.admin import AdminRouter
from client.connection import ToolError, error_name

__all__ = ["Sender", "key_partition", "murmur2"]

PRODUCE = 0


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 (seed 0x9747b28c) as used by its default partitioner; the
    result is a signed 32-bit int, like Java's."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length & 3
    idx = 4 * n4
    if tail == 3:
        h ^= data[idx + 2] << 16
    if tail >= 2:
        h ^= data[idx + 1] << 8
    if tail >= 1:
        h ^= data[idx]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Sender:
    """Accumulates records per partition and sends Produce requests to the leaders."""

    def __init__(self, client, topic: str, leaders: dict[int, int], codec: int, acks: int,
                 batch_size: int) -> None:
        from protocol.record_builder import RecordBatchBuilder

        self._builder_cls = RecordBatchBuilder
        self.client = client
        self.topic = topic
        self.leaders = leaders
        self.codec = codec
        self.acks = acks
        self.batch_size = batch_size
        self.version = client.version_for(PRODUCE, max_version=9)
        if self.version < 3:
            raise ToolError("the broker does not support RecordBatch v2 (Produce v3+)")
        self.pending: dict[int, tuple] = {}  # partition -> (builder, approx bytes)
        self.sent = 0

    def add(self, partition: int, headers, key, value) -> None:
        builder, size = self.pending.get(partition, (None, 0))
        if builder is None:
            builder = self._builder_cls(compression_type=self.codec)
        builder.append(int(time.time() * 1000), key, value, headers)
        size += len(key or b"") + len(value or b"") + 16 + sum(
            len(k) + len(v or b"") for k, v in headers)
        self.pending[partition] = (builder, size)
        if size >= self.batch_size:
            self.flush([partition])

    def flush(self, partitions=None) -> None:
        parts = list(self.pending) if partitions is None else partitions
        batches = {p: self.pending.pop(p)[0].build() for p in parts}
        if self.acks == 0:  # no answer to wait for: nothing to resend
            by_leader: dict[int, list] = {}
            for p, records in batches.items():
                by_leader.setdefault(self.leaders[p], []).append((p, records))
            for leader, items in by_leader.items():
                self.client.send_no_response(PRODUCE, self._body(items), version=self.version,
                                             node=leader)
            self.sent += sum(len(b) for b in batches.values())
            return

        def build(tps):
            return self._body([(p, batches[p]) for _, p in tps])

        def results(resp):
            for t in resp.responses:
                for pr in t.partition_responses:
                    yield (t.name, pr.index), pr.error_code, pr

        leaders = {(self.topic, p): n for p, n in self.leaders.items()}
        got = AdminRouter(self.client).to_leaders(  # resent to a new leader after a move
            PRODUCE, [(self.topic, p) for p in batches], build, results, self.version, leaders)
        self.leaders.update({p: n for (_, p), n in leaders.items()})
        for (t, p), (code, pr) in sorted(got.items()):
            if code:
                msg = getattr(pr, "error_message", None)
                raise ToolError(f"producing to {t}-{p} failed: {error_name(code)}"
                                + (f" ({msg})" if msg else ""))
        self.sent += sum(len(b) for b in batches.values())

    def _body(self, items) -> dict:
        return {"transactional_id": None, "acks": self.acks, "timeout_ms": 30000,
                "topic_data": [{"name": self.topic, "partition_data": [
                    {"index": p, "records": records} for p, records in items]}]}
