"""benchmarks/metadata_view.py: the scale benchmark's raw scan of Metadata v9 answers
agrees with the generated codec's decode (brokers with and without rack, a topic error,
replica lists of several lengths, offline replicas, more than 127 partitions)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from metadata_view import scan_partitions  # noqa: E402

from protocol import api  # noqa: E402

MetadataResponse = api.API_KEYS[3].response_cls


def _frame(response) -> bytes:
    return struct.pack(">i", 7) + b"\x00" + response.encode(9)  # header v1: no tags


def test_scan_agrees_with_the_codec():
    R = MetadataResponse
    parts = [R.MetadataResponsePartition(
        error_code=0, partition_index=p, leader_id=(p % 4) - 1, leader_epoch=p,
        replica_nodes=list(range(1 + p % 3)), isr_nodes=list(range(p % 4)),
        offline_replicas=[9] * (p % 2)) for p in range(300)]
    response = R(throttle_time_ms=5, brokers=[
        R.MetadataResponseBroker(node_id=1, host="a.example", port=9092, rack=None),
        R.MetadataResponseBroker(node_id=2, host="b", port=9093, rack="rack-2")],
        cluster_id="c1", controller_id=2, topics=[
        R.MetadataResponseTopic(error_code=0, name="t", is_internal=False, partitions=parts),
        R.MetadataResponseTopic(error_code=3, name="missing", is_internal=False,
                                partitions=[]),
        R.MetadataResponseTopic(error_code=0, name="u", is_internal=True,
                                partitions=parts[:2])])
    want = [(p.leader_id, len(p.isr_nodes)) for t in response.topics if not t.error_code
            for p in t.partitions]
    assert scan_partitions(_frame(response)) == want
    assert scan_partitions(memoryview(_frame(response))) == want
