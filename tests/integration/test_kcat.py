"""kcat (Debian's package, librdkafka 2.0.x) against a live broker.

Covers: ``-L`` metadata; produce/consume with every codec (``-z``), keys (``-K``), headers
(``-H``), null values (``-Z``), a 900 KB record, a 100-partition topic (records land on
``crc32(key) % 100``, librdkafka's default ``consistent_random`` partitioner), auto-created
topics; and kcat's legacy mode (``api.version.request=false`` with
``broker.version.fallback`` 0.9.0 / 0.8.2), where librdkafka speaks Produce v1/v0 and Fetch
v1/v0 with magic 0 message sets: the broker up-converts them to RecordBatch v2 on append and
down-converts on fetch, so legacy and modern clients read each other's records.
"""

from __future__ import annotations

import random
import string
import time
import zlib

import pytest

from tests.integration.harness import BrokerProcess, kcat_consume, kcat_produce, run_kcat

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
LEGACY_CODECS = ["none", "gzip", "snappy", "lz4"]  # magic 0/1 know no zstd


def legacy(version: str) -> list[str]:
    """kcat options for a pre-ApiVersions broker of ``version`` (magic 0 message sets)."""
    return ["-X", "api.version.request=false", "-X", f"broker.version.fallback={version}"]


def ok(proc) -> str:
    assert proc.returncode == 0, (proc.returncode, proc.stderr.decode(errors="replace")[-2000:])
    return proc.stdout.decode()


def consumed(broker: BrokerProcess, topic: str, count: int, extra=()) -> list[list[str]]:
    """``[[partition, offset, key, value], ...]`` for ``count`` records from the beginning."""
    out = ok(kcat_consume(broker.bootstrap, topic, count, extra=list(extra)))
    rows = [line.split("\t") for line in out.splitlines() if line]
    assert len(rows) == count, out[-2000:]
    return rows


def create_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10,
                                  request_timeout=15)
    futures[topic].result(timeout=20)


def test_metadata_lists_broker_and_topics(shared_broker, kcat):
    ok(kcat_produce(shared_broker.bootstrap, "kcat-md", [b"k:v"]))
    text = ok(run_kcat(["-b", shared_broker.bootstrap, "-L", "-t", "kcat-md"]))
    assert f"broker 0 at {shared_broker.bootstrap} (controller)" in text
    assert 'topic "kcat-md" with 1 partitions' in text
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in text


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_codec_keys(shared_broker, kcat, codec):
    topic = f"kcat-codec-{codec}"
    lines = [b"key%d:value-%d-%s" % (i, i, b"z" * (i % 50)) for i in range(200)]
    ok(kcat_produce(shared_broker.bootstrap, topic, lines, compression=codec))
    rows = consumed(shared_broker, topic, 200)
    assert [r[1] for r in rows] == [str(i) for i in range(200)]
    assert [f"{r[2]}:{r[3]}".encode() for r in rows] == lines


def test_auto_created_topic_appears_in_metadata(shared_broker, kcat):
    before = ok(run_kcat(["-b", shared_broker.bootstrap, "-L"]))
    assert '"kcat-auto"' not in before
    ok(kcat_produce(shared_broker.bootstrap, "kcat-auto", [b"a:1", b"b:2"]))
    text = ok(run_kcat(["-b", shared_broker.bootstrap, "-L", "-t", "kcat-auto"]))
    assert 'topic "kcat-auto" with 1 partitions' in text
    assert [r[2:] for r in consumed(shared_broker, "kcat-auto", 2)] == [["a", "1"], ["b", "2"]]


def test_headers(shared_broker, kcat):
    proc = run_kcat(["-b", shared_broker.bootstrap, "-t", "kcat-headers", "-P", "-H", "h1=v1",
                     "-H", "h2=", "-H", "trace=abc=def"], input=b"one\ntwo\n")
    ok(proc)
    out = ok(run_kcat(["-b", shared_broker.bootstrap, "-t", "kcat-headers", "-C", "-o",
                       "beginning", "-e", "-f", "%o|%h|%s\n"]))
    assert out.splitlines() == ["0|h1=v1,h2=,trace=abc=def|one", "1|h1=v1,h2=,trace=abc=def|two"]


def test_null_values_and_keys(shared_broker, kcat):
    ok(kcat_produce(shared_broker.bootstrap, "kcat-null", [b"k1:", b"k2:v2", b":v3"],
                    extra=["-Z"]))
    out = ok(run_kcat(["-b", shared_broker.bootstrap, "-t", "kcat-null", "-C", "-o", "beginning",
                       "-e", "-Z", "-f", "%o|%k|%K|%s|%S\n"]))
    assert out.splitlines() == ["0|k1|2|NULL|-1", "1|k2|2|v2|2", "2|NULL|-1|v3|2"]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_900kb_record(shared_broker, kcat, codec):
    rnd = random.Random(900)
    value = "".join(rnd.choices(string.ascii_letters + string.digits, k=900_000)).encode()
    topic = f"kcat-big-{codec}"
    big = ["-X", "message.max.bytes=2000000"]
    ok(kcat_produce(shared_broker.bootstrap, topic, [b"small:x", b"big:" + value, b"after:y"],
                    compression=codec, extra=big))
    out = run_kcat(["-b", shared_broker.bootstrap, "-t", topic, "-C", "-o", "beginning", "-e",
                    "-X", "fetch.message.max.bytes=2000000", "-f", "%o %k %S %s\n"])
    lines = ok(out).encode().splitlines()
    assert lines[0] == b"0 small 1 x"
    assert lines[1] == b"1 big 900000 " + value
    assert lines[2] == b"2 after 1 y"


def test_100_partitions_keyed(shared_broker, kcat):
    topic = "kcat-p100"
    create_topic(shared_broker, topic, 100)
    # Keys chosen so that crc32(key) % 100 hits every partition at least twice.
    keys, hits = [], [0] * 100
    i = 0
    while min(hits) < 2:
        k = b"key-%d" % i
        p = zlib.crc32(k) % 100
        if hits[p] < 3:
            keys.append(k)
            hits[p] += 1
        i += 1
    lines = [k + b":v-" + k for k in keys]
    ok(kcat_produce(shared_broker.bootstrap, topic, lines, compression="lz4"))
    rows = consumed(shared_broker, topic, len(lines))
    by_part: dict[int, list[tuple[int, str]]] = {}
    for part, off, key, val in rows:
        assert int(part) == zlib.crc32(key.encode()) % 100, (part, key)
        assert val == "v-" + key
        by_part.setdefault(int(part), []).append((int(off), key))
    assert sorted(by_part) == list(range(100))
    for p, recs in by_part.items():
        assert [o for o, _ in recs] == list(range(len(recs))), p
        # per partition, records keep the order they were produced in
        assert [k for _, k in recs] == [k.decode() for k in keys if zlib.crc32(k) % 100 == p]


@pytest.mark.parametrize("version", ["0.9.0", "0.8.2"])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_mode_produce_consume(shared_broker, kcat, version, codec):
    """Magic 0 message sets in (Produce v0/v1) and out (Fetch v0/v1), plus cross-reads."""
    topic = f"kcat-legacy-{version}-{codec}"
    lines = [b"k%d:legacy-%d" % (i, i) for i in range(50)]
    ok(kcat_produce(shared_broker.bootstrap, topic, lines, compression=codec,
                    extra=legacy(version)))
    for extra in (legacy(version), []):  # legacy reader (down-conversion), modern reader
        rows = consumed(shared_broker, topic, 50, extra=extra)
        assert [int(r[1]) for r in rows] == list(range(50)), extra
        assert [f"{r[2]}:{r[3]}".encode() for r in rows] == lines, extra
    # A modern producer's batches (v2, with headers) down-converted for the legacy reader.
    ok(run_kcat(["-b", shared_broker.bootstrap, "-t", topic, "-P", "-K", ":", "-z",
                 "lz4" if codec == "none" else codec, "-H", "h=1"], input=b"new1:a\nnew2:b\n"))
    rows = consumed(shared_broker, topic, 52, extra=legacy(version))
    assert [r[1:] for r in rows[50:]] == [["50", "new1", "a"], ["51", "new2", "b"]]


@pytest.mark.parametrize("version", ["0.9.0", "0.8.2"])
def test_legacy_mode_metadata_and_900kb(shared_broker, kcat, version):
    topic = f"kcat-legacy-big-{version}"
    value = b"L" * 900_000
    ok(kcat_produce(shared_broker.bootstrap, topic, [b"big:" + value],
                    extra=[*legacy(version), "-X", "message.max.bytes=2000000"]))
    text = ok(run_kcat(["-b", shared_broker.bootstrap, "-L", "-t", topic, *legacy(version)]))
    assert f'topic "{topic}" with 1 partitions' in text
    out = run_kcat(["-b", shared_broker.bootstrap, "-t", topic, "-C", "-o", "beginning", "-e",
                    "-X", "fetch.message.max.bytes=2000000", "-f", "%o %k %S\n",
                    *legacy(version)])
    assert ok(out).splitlines() == ["0 big 900000"]


def test_relative_offsets_and_offsets_for_times(shared_broker, kcat):
    """``-o -N`` (ListOffsets latest, then fetch N back) and ``-Q`` (ListOffsets by timestamp:
    the first offset whose timestamp is >= the given one)."""
    topic = "kcat-offsets"
    for part in range(3):  # three produce requests with distinct CreateTimes
        ok(kcat_produce(shared_broker.bootstrap, topic, [b"k%d:v%d" % (part, part)]))
        time.sleep(0.05)
    rows = ok(run_kcat(["-b", shared_broker.bootstrap, "-t", topic, "-C", "-o", "-2", "-e",
                        "-f", "%o %s %T\n"])).splitlines()
    assert [r.split()[:2] for r in rows] == [["1", "v1"], ["2", "v2"]]
    ts1 = int(rows[0].split()[2])
    out = ok(run_kcat(["-b", shared_broker.bootstrap, "-Q", "-t", f"{topic}:0:{ts1}"]))
    assert "offset 1" in out, out
    out = ok(run_kcat(["-b", shared_broker.bootstrap, "-Q", "-t", f"{topic}:0:{ts1 + 10**6}"]))
    assert "offset -1" in out, out  # no record that late: offset -1
