"""Every captured client request frame decodes and re-encodes to identical bytes.

Frames: ../shared/kafka-protocol/captured (4-byte size prefix, header, body). Two
librdkafka 2.16.0 frames carry bytes after the body (documented in its README); those
trailing bytes are the only difference allowed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.api import API_KEYS, decode_request, encode_request
from protocol.errors import ProtocolError
from protocol.headers import decode_request_header, encode_request_header

REPO = Path(__file__).resolve().parents[3]
CANDIDATES = [REPO.parent / "shared" / "kafka-protocol" / "captured",
              Path("/work/shared/kafka-protocol/captured")]
CAPTURED = next((p for p in CANDIDATES if (p / "index.jsonl").is_file()), None)
# file -> number of bytes after the body
TRAILING = {
    "confluent-kafka/0003-Metadata-v12.bin": 3,
    "confluent-kafka/0138-AlterUserScramCredentials-v0.bin": 1,
}

pytestmark = pytest.mark.skipif(CAPTURED is None, reason="captured frames not present")


def _index():
    if CAPTURED is None:
        return []
    return [json.loads(line) for line in (CAPTURED / "index.jsonl").read_text().splitlines()
            if line.strip()]


ENTRIES = _index()


def _frame(entry) -> bytes:
    data = (CAPTURED / entry["file"]).read_bytes()
    assert int.from_bytes(data[:4], "big", signed=True) == len(data) - 4
    return data[4:]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_captured_frame_round_trips(entry):
    frame = _frame(entry)
    header, pos = decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (
        entry["api_key"], entry["api_version"], entry["correlation_id"])
    assert header.client_id == entry["client_id"]
    assert API_KEYS[header.api_key].name == entry["api_name"]
    msg = decode_request(header.api_key, header.api_version, frame, pos)
    encoded = encode_request_header(header) + encode_request(msg, header.api_version)
    extra = TRAILING.get(entry["file"], 0)
    assert encoded == frame[:len(frame) - extra]
    assert len(encoded) + extra == len(frame)
    # the decoded object survives a second round trip
    again = decode_request(header.api_key, header.api_version, encoded, pos)
    assert again == msg


def test_produce_records_are_zero_copy_views():
    entry = next(e for e in ENTRIES if e["api_name"] == "Produce" and e["length"] > 100_000)
    frame = memoryview(_frame(entry))
    header, pos = decode_request_header(frame)
    msg = decode_request(0, header.api_version, frame, pos)
    records = msg.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is frame.obj  # a view of the frame, not a copy
    assert len(records) > 100_000


def test_every_strict_prefix_of_small_frames_is_rejected_with_a_typed_error():
    checked = 0
    for entry in ENTRIES:
        frame = _frame(entry)
        if len(frame) > 600 or entry["file"] in TRAILING:
            continue
        header, pos = decode_request_header(frame)
        for cut in range(pos, len(frame)):
            with pytest.raises(ProtocolError):
                decode_request(header.api_key, header.api_version, frame[:cut], pos)
        checked += 1
    assert checked > 50
