"""Record batches from real client produce frames (kafka-python, aiokafka, confluent-kafka).

The produce request is parsed minimally here (header v1/v2, Produce v3-v10 body) so these
tests do not depend on protocol.api.
"""

import json
import struct
from pathlib import Path

import pytest

from protocol.record_format import LOG_APPEND_TIME, CorruptRecordError
from protocol.records import RecordBatch, iter_batches

CAPTURED = next((p for p in (Path(__file__).resolve().parents[3].parent / "shared" / "kafka-protocol"
                 / "captured", Path("/work/shared/kafka-protocol/captured"))
                 if p.is_dir()), Path("/work/shared/kafka-protocol/captured"))
pytestmark = pytest.mark.skipif(not CAPTURED.exists(), reason="captured frames not present")


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def skip(self, n: int) -> None:
        self.pos += n

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.skip(self.uvarint())


def produce_records(frame: bytes) -> list[tuple[str, int, bytes]]:
    """(topic, partition, records bytes) of a Produce v3-v10 request frame."""
    r = _Reader(frame)
    r.skip(4)  # size prefix
    api_key = r.take(">h")
    version = r.take(">h")
    assert api_key == 0 and 3 <= version <= 10
    r.skip(4)  # correlation id
    r.skip(max(r.take(">h"), 0))  # client id
    flexible = version >= 9
    if flexible:
        r.tagged_fields()
        r.skip(max(r.uvarint() - 1, 0))  # transactional id
    else:
        r.skip(max(r.take(">h"), 0))
    r.skip(2 + 4)  # acks, timeout
    out = []
    n_topics = r.uvarint() - 1 if flexible else r.take(">i")
    for _ in range(n_topics):
        if flexible:
            n = r.uvarint() - 1
        else:
            n = r.take(">h")
        topic = r.data[r.pos : r.pos + n].decode()
        r.skip(n)
        n_parts = r.uvarint() - 1 if flexible else r.take(">i")
        for _ in range(n_parts):
            partition = r.take(">i")
            size = r.uvarint() - 1 if flexible else r.take(">i")
            out.append((topic, partition, r.data[r.pos : r.pos + size]))
            r.skip(size)
            if flexible:
                r.tagged_fields()
        if flexible:
            r.tagged_fields()
    return out


def _produce_index():
    entries = []
    for line in (CAPTURED / "index.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["api_name"] == "Produce" and e["client"] != "kcat":
            entries.append(e)
    return entries


PRODUCE = _produce_index() if CAPTURED.exists() else []
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_every_client_and_codec_is_covered():
    seen = {(e["client"], b["codec"]) for e in PRODUCE for b in e["produce"]["batches"]}
    for client in ("kafka-python", "aiokafka", "confluent-kafka"):
        for codec in CODECS:
            assert (client, codec) in seen


@pytest.mark.parametrize("entry", PRODUCE, ids=[e["file"] for e in PRODUCE])
def test_captured_batches_parse_and_verify(entry):
    frame = (CAPTURED / entry["file"]).read_bytes()
    parts = produce_records(frame)
    expected = entry["produce"]["batches"]
    assert len(parts) == len(expected)
    for (topic, partition, records), exp in zip(parts, expected, strict=True):
        assert (topic, partition) == (exp["topic"], exp["partition"])
        assert len(records) == exp["bytes"]
        batches = list(iter_batches(records))
        assert len(batches) == 1
        batch = batches[0]
        batch.validate()
        assert batch.size_in_bytes == len(records)
        assert batch.compression_type == CODECS[exp["codec"]]
        assert batch.record_count == exp["records"]
        assert batch.producer_id == exp["producer_id"]
        assert batch.producer_epoch == exp["producer_epoch"]
        assert batch.base_sequence == exp["base_sequence"]
        assert batch.is_transactional == exp["transactional"]
        assert batch.is_control == exp["control"]
        recs = list(batch)
        assert len(recs) == batch.record_count
        assert [r.offset for r in recs] == list(range(len(recs)))
        assert max(r.timestamp for r in recs) == batch.max_timestamp
        assert batch.last_offset_delta == len(recs) - 1


@pytest.mark.parametrize("entry", PRODUCE, ids=[e["file"] for e in PRODUCE])
def test_captured_batches_patch_in_place(entry):
    frame = (CAPTURED / entry["file"]).read_bytes()
    for _topic, _partition, records in produce_records(frame):
        buf = bytearray(records)
        batch = RecordBatch(buf)
        before = [(r.key, r.value, r.headers) for r in batch]
        batch.set_base_offset(1000)
        batch.set_partition_leader_epoch(7)
        assert batch.is_valid()  # both fields lie outside the CRC
        again = RecordBatch(buf)
        assert (again.base_offset, again.partition_leader_epoch) == (1000, 7)
        assert [r.offset for r in again] == list(range(1000, 1000 + again.record_count))
        batch.set_max_timestamp(1_700_000_000_000, LOG_APPEND_TIME)
        again = RecordBatch(buf)
        again.validate()
        assert again.timestamp_type == LOG_APPEND_TIME
        assert again.crc != RecordBatch(records).crc
        recs = list(again)
        assert {r.timestamp for r in recs} == {1_700_000_000_000}
        assert [(r.key, r.value, r.headers) for r in recs] == before


def _sample_content():
    """Headers, null keys, null values as the scenarios produced them."""
    found = {"headers": False, "null_key": False, "null_value": False}
    for entry in PRODUCE:
        frame = (CAPTURED / entry["file"]).read_bytes()
        for _t, _p, records in produce_records(frame):
            for r in RecordBatch(records):
                found["headers"] |= bool(r.headers)
                found["null_key"] |= r.key is None
                found["null_value"] |= r.value is None
    return found


def test_captured_frames_include_headers_and_nulls():
    assert _sample_content() == {"headers": True, "null_key": True, "null_value": True}


CODEC_SCENARIOS = [e for e in PRODUCE if e["scenario"] in {f"produce-{c}" for c in CODECS}]


@pytest.mark.parametrize("entry", CODEC_SCENARIOS, ids=[e["file"] for e in CODEC_SCENARIOS])
def test_codec_scenarios_decode_to_the_same_records(entry):
    """Each client produced the same 7 records in each codec: headers, a null value, a
    null key."""
    frame = (CAPTURED / entry["file"]).read_bytes()
    ((_t, _p, records),) = produce_records(frame)
    recs = list(RecordBatch(records))
    headers = [("h-text", b"v1"), ("h-bin", bytes(range(8))), ("h-empty", b"")]
    for i in range(5):
        assert recs[i].key == f"key-{i}".encode()
        assert recs[i].value.startswith(f"value-{i}-".encode()) and len(recs[i].value) == 160
        assert recs[i].headers == headers
    assert (recs[5].key, recs[5].value, recs[5].headers) == (b"key-null", None, [])
    assert (recs[6].key, recs[6].value) == (None, b"no-key")


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent-kafka"])
def test_corrupting_any_covered_byte_fails_validate(client):
    entry = next(
        e
        for e in PRODUCE
        if e["client"] == client and e["produce"]["batches"][0]["codec"] == "gzip"
    )
    frame = (CAPTURED / entry["file"]).read_bytes()
    ((_t, _p, records),) = produce_records(frame)
    for pos in range(21, len(records)):
        buf = bytearray(records)
        buf[pos] ^= 0x01
        batch = RecordBatch(buf)
        assert not batch.is_valid()
        with pytest.raises(CorruptRecordError):
            batch.validate()


def test_transactional_frames_parse():
    txn = [e for e in PRODUCE if e["produce"]["transactional_id"]]
    assert txn
    for entry in txn:
        frame = (CAPTURED / entry["file"]).read_bytes()
        for _t, _p, records in produce_records(frame):
            batch = RecordBatch(records)
            batch.validate()
            assert batch.is_transactional and not batch.is_control
            assert batch.producer_id >= 0
