"""Unit tests of the tools' pure parts: murmur2 partitioning, line parsing, the message
formatter, key=value lists, the progress bar (manual clock) and dump-log on built files."""

from __future__ import annotations

import io
import struct

import pytest

from cli._common import UsageError, split_pairs, topic_matcher
from cli.console_consumer import Formatter
from cli.console_producer import LineReader
from client.connection import ToolError, build, parse_bootstrap
from client.producer import key_partition, murmur2
from protocol import api
from protocol.record_builder import RecordBatchBuilder
from protocol.records import Record


@pytest.mark.parametrize("text,expected", [
    # Kafka's published murmur2 test vectors (UtilsTest)
    ("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971), ("abc", 479470107),
])
def test_murmur2_matches_kafka(text, expected):
    assert murmur2(text.encode()) == expected


def test_key_partition_is_stable_and_in_range():
    parts = {key_partition(b"key-%d" % i, 7) for i in range(200)}
    assert parts <= set(range(7)) and len(parts) == 7
    assert key_partition(b"abc", 7) == (479470107 & 0x7FFFFFFF) % 7


def test_line_reader_keys_headers_null_marker():
    r = LineReader({"parse.key": "true", "parse.headers": "true", "null.marker": "<null>"})
    headers, key, value = r.parse("h1:a,h2\tk\tv\tw", 1)
    assert headers == [("h1", b"a"), ("h2", None)] and key == b"k" and value == b"v\tw"
    assert r.parse("NO_HEADERS\t<null>\tx", 2) == ([], None, b"x")
    with pytest.raises(ToolError, match="line 3"):
        r.parse("no-delimiters", 3)
    plain = LineReader({"parse.key": "true", "key.separator": ":", "ignore.error": "true"})
    assert plain.parse("just-value", 1) == ([], None, b"just-value")
    assert plain.parse("a:b:c", 1) == ([], b"a", b"b:c")


def test_formatter_layout_follows_kafka_default_message_formatter():
    f = Formatter({"print.timestamp": "true", "print.partition": "true",
                   "print.offset": "true", "print.headers": "true", "print.key": "true"})
    rec = Record(5, 1700, b"k", b"v", [("h", b"1"), ("g", None)])
    assert f.format(2, rec, 0) == "CreateTime:1700\tPartition:2\tOffset:5\th:1,g:null\tk\tv\n"
    rec = Record(6, -1, None, None, [])
    assert f.format(0, rec, 1) == "NO_TIMESTAMP\tPartition:0\tOffset:6\tNO_HEADERS\tnull\tnull\n"
    assert Formatter({}).format(0, Record(1, 10, b"k", b"v", []), 0) == "v\n"


def test_split_pairs_and_topic_matcher():
    assert split_pairs("a=1,b=[x,y],c=") == [("a", "1"), ("b", "x,y"), ("c", "")]
    with pytest.raises(UsageError):
        split_pairs("novalue")
    m = topic_matcher("t.*")
    assert m("t1") and m("topic") and not m("xt")
    assert topic_matcher("bad[")("bad[") and not topic_matcher("bad[")("bad")


def test_parse_bootstrap_and_build():
    assert parse_bootstrap("h1:1, h2:2") == [("h1", 1), ("h2", 2)]
    with pytest.raises(ToolError):
        parse_bootstrap("nohost")
    cls = api.API_KEYS[32].request_cls
    req = build(cls, {"resources": [{"resource_type": 2, "resource_name": "t",
                                     "configuration_keys": None}]})
    assert req.resources[0].resource_name == "t"
    with pytest.raises(ToolError, match="no field"):
        build(cls, {"nope": 1})


def _segment(tmp_path, batches):
    data = b"".join(batches)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    return path, data


def _batch(base, n, codec=0):
    b = RecordBatchBuilder(compression_type=codec, base_offset=base)
    for i in range(n):
        b.append(1000 + i, b"k%d" % i, b"value-%d" % (base + i), [("h", b"x")])
    return b.build()


def _run_dump(files, *extra):
    import contextlib

    from broker.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["dump-log", "--files", ",".join(map(str, files)), *extra])
    return rc, out.getvalue(), err.getvalue()


def test_dump_log_prints_batches_records_and_checks_index(tmp_path):
    b1, b2 = _batch(0, 3), _batch(3, 2, codec=1)
    path, data = _segment(tmp_path, [b1, b2])
    index = tmp_path / "00000000000000000000.index"
    index.write_bytes(struct.pack(">ii", 4, len(b1)) + b"\0" * 16)  # one entry + prealloc
    tindex = tmp_path / "00000000000000000000.timeindex"
    tindex.write_bytes(struct.pack(">qi", 1002, 2) + struct.pack(">qi", 1004, 4) + b"\0" * 12)
    rc, out, err = _run_dump([path, index, tindex], "--print-data-log")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Dumping {path}" and lines[1] == "Log starting offset: 0"
    assert lines[2].startswith("baseOffset: 0 lastOffset: 2 count: 3 ")
    assert "position: 0 CreateTime: 1002" in lines[2] and lines[2].endswith("crcValid: true")
    assert lines[3] == ("| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 7 sequence: -1 "
                        "headerKeys: [h] key: k0 payload: value-0")
    assert "compresscodec: gzip" in lines[6]
    assert f"offset: 4 position: {len(b1)}" in lines
    assert "timestamp: 1004 offset: 4" in lines and len([x for x in lines if
                                                        x.startswith("timestamp")]) == 2

    # an index entry that does not point at a batch end, and a flipped byte
    index.write_bytes(struct.pack(">ii", 3, len(b1)))
    rc, out, err = _run_dump([index])
    assert rc == 1 and "Mismatches in :" in out and "Index offset: 3, log offset: 4" in out
    bad = bytearray(data)
    bad[len(b1) + 70] ^= 0xFF
    path.write_bytes(bytes(bad) + b"\0\0\0")
    rc, out, err = _run_dump([path], "--deep-iteration")
    assert rc == 1 and "crcValid: false" in out and "CRC mismatch" in err
    assert "Found 3 invalid bytes at the end of the segment" in out


def test_dump_log_rejects_unknown_files(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("hi")
    rc, out, err = _run_dump([p])
    assert rc == 1 and "not a .log" in err
