"""A segment we wrote parses with kafka-python's record reader, batch by batch."""

import warnings

import crc32c

from protocol.record_builder import RecordBatchBuilder
from storage.config import LogConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's own imports
    from kafka.record import MemoryRecords


def test_segment_parses_with_kafka_python(make_log, clock):
    log = make_log(LogConfig(segment_bytes=1 << 20, index_interval_bytes=512))
    sent = []
    for i in range(40):
        b = RecordBatchBuilder(compression_type=[0, 1, 2, 3, 4][i % 5],
                               producer_id=5 if i % 2 else -1,
                               producer_epoch=0 if i % 2 else -1,
                               base_sequence=(i // 2) * 3 if i % 2 else -1)
        for j in range(3):
            b.append(clock.now + i * 10 + j, b"key-%d" % i, b"value-%d-%d" % (i, j) * 20,
                     headers=[("h", b"x")])
        info = log.append_as_leader(bytearray(b.build()), leader_epoch=4)
        sent.append(info)
    log.flush()
    seg = log.active_segment
    with open(seg.log_path, "rb") as f:
        data = f.read()
    records = MemoryRecords(data)
    n = 0
    while records.has_next():
        kb = records.next_batch()
        info = sent[n]
        assert kb.base_offset == info.first_offset
        assert kb.last_offset == info.last_offset
        assert kb.leader_epoch == 4
        assert kb.max_timestamp == info.max_timestamp
        assert kb.validate_crc()
        start = sum(s.valid_bytes for s in sent[:n])
        assert kb.crc == crc32c.crc32c(data[start + 21:start + info.valid_bytes])
        recs = list(kb)
        assert [r.offset for r in recs] == list(range(info.first_offset, info.last_offset + 1))
        assert [r.timestamp for r in recs] == [clock.now + n * 10 + j for j in range(3)]
        assert recs[0].key == b"key-%d" % n and recs[2].value == b"value-%d-2" % n * 20
        n += 1
    assert n == 40
