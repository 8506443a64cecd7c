"""Each ``josef`` tool run as a subprocess against a live broker, its output checked
(cross-checked with kcat / kafka-python where the tool's own view is not enough)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.integration.harness import REPO_ROOT, kcat_consume, kcat_produce, require_tool

pytestmark = pytest.mark.timeout(180)


def josef(*args: str, input: bytes | None = None, timeout: float = 60,
          env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], input=input,
                          capture_output=True, timeout=timeout, cwd=REPO_ROOT, env=env)


def _topic(prefix="tool") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    return res.stdout.decode()


def test_help_for_every_tool():
    for tool in ("topics", "configs", "console-producer", "console-consumer", "get-offsets",
                 "delete-records", "dump-log", "consumer-groups"):
        res = josef(tool, "--help")
        assert res.returncode == 0 and b"usage: josef " + tool.encode() in res.stdout, tool
    res = josef("--help")
    assert b"console-producer" in res.stdout and b"ignoring tool module" not in res.stderr


def test_unreachable_bootstrap_is_one_line_error():
    res = josef("topics", "--bootstrap-server", "127.0.0.1:1", "--list")
    assert res.returncode == 1
    err = res.stderr.decode().strip()
    assert err.startswith("josef topics: error: cannot connect to 127.0.0.1:1")
    assert len(err.splitlines()) == 1


def test_topics_lifecycle(shared_broker):
    b = shared_broker.bootstrap
    name = _topic()
    out = _ok(josef("topics", "--bootstrap-server", b, "--create", "--topic", name,
                    "--partitions", "2", "--replication-factor", "1",
                    "--config", "retention.ms=60000"))
    assert out == f"Created topic {name}.\n"
    again = josef("topics", "--bootstrap-server", b, "--create", "--topic", name)
    assert again.returncode == 1 and b"already exists" in again.stderr
    _ok(josef("topics", "--bootstrap-server", b, "--create", "--topic", name,
              "--if-not-exists"))
    assert name in _ok(josef("topics", "--bootstrap-server", b, "--list")).splitlines()
    _ok(josef("topics", "--bootstrap-server", b, "--alter", "--topic", name,
              "--partitions", "3"))
    out = _ok(josef("topics", "--bootstrap-server", b, "--describe", "--topic", name))
    lines = out.splitlines()
    assert lines[0].startswith(f"Topic: {name}\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000" in lines[0]
    assert lines[1].startswith(f"\tTopic: {name}\tPartition: 0\tLeader: ")
    assert len(lines) == 4
    res = josef("topics", "--bootstrap-server", b, "--delete", "--topic", "__consumer_offsets")
    assert res.returncode == 1 and b"is a kafka internal topic and is not allowed to be " \
                                   b"marked for deletion." in res.stderr
    _ok(josef("topics", "--bootstrap-server", b, "--delete", "--topic", name))
    assert name not in _ok(josef("topics", "--bootstrap-server", b, "--list")).splitlines()
    res = josef("topics", "--bootstrap-server", b, "--create", "--topic", "bad/name")
    assert res.returncode == 1 and b"INVALID_TOPIC_EXCEPTION" in res.stderr


def test_configs_describe_and_alter(shared_broker):
    b = shared_broker.bootstrap
    name = _topic()
    _ok(josef("topics", "--bootstrap-server", b, "--create", "--topic", name))
    out = _ok(josef("configs", "--bootstrap-server", b, "--alter", "--entity-type", "topics",
                    "--entity-name", name, "--add-config",
                    "retention.ms=1234,cleanup.policy=[delete,compact]"))
    assert out == f"Completed updating config for topic {name}.\n"
    out = _ok(josef("configs", "--bootstrap-server", b, "--describe", "--entity-type",
                    "topics", "--entity-name", name))
    lines = out.splitlines()
    assert lines[0] == f"Dynamic configs for topic {name} are:"
    assert lines[1].startswith("  cleanup.policy=delete,compact sensitive=false synonyms="
                               "{DYNAMIC_TOPIC_CONFIG:cleanup.policy=delete,compact")
    assert lines[2].startswith("  retention.ms=1234 sensitive=false synonyms="
                               "{DYNAMIC_TOPIC_CONFIG:retention.ms=1234, ")
    _ok(josef("configs", "--bootstrap-server", b, "--alter", "--entity-type", "topics",
              "--entity-name", name, "--delete-config", "retention.ms"))
    out = _ok(josef("configs", "--bootstrap-server", b, "--describe", "--entity-type",
                    "topics", "--entity-name", name, "--all"))
    assert f"All configs for topic {name} are:" in out
    assert "  retention.ms=604800000 sensitive=false synonyms={DEFAULT_CONFIG:" \
           "log.retention.hours=168}" in out
    bad = josef("configs", "--bootstrap-server", b, "--alter", "--entity-type", "topics",
                "--entity-name", name, "--add-config", "retention.ms=soon")
    assert bad.returncode == 1 and b"INVALID_CONFIG" in bad.stderr
    out = _ok(josef("configs", "--bootstrap-server", b, "--describe", "--entity-type",
                    "brokers", "--all"))
    assert "log.segment.bytes=" in out and "broker.id=" in out


def test_console_producer_and_consumer(shared_broker):
    b = shared_broker.bootstrap
    name = _topic()
    _ok(josef("topics", "--bootstrap-server", b, "--create", "--topic", name))
    lines = b"h1:a,h2:b\tk1\tv1\nNO_HEADERS\tk2\tv2\n"
    _ok(josef("console-producer", "--bootstrap-server", b, "--topic", name,
              "--property", "parse.key=true", "--property", "parse.headers=true",
              "--compression-codec", "zstd", input=lines))
    _ok(josef("console-producer", "--bootstrap-server", b, "--topic", name,
              input=b"plain\n"))
    res = josef("console-consumer", "--bootstrap-server", b, "--topic", name,
                "--from-beginning", "--max-messages", "3",
                "--property", "print.key=true", "--property", "print.offset=true",
                "--property", "print.headers=true", "--property", "print.partition=true")
    out = _ok(res)
    assert out.splitlines() == ["Partition:0\tOffset:0\th1:a,h2:b\tk1\tv1",
                                "Partition:0\tOffset:1\tNO_HEADERS\tk2\tv2",
                                "Partition:0\tOffset:2\tNO_HEADERS\tnull\tplain"]
    assert b"Processed a total of 3 messages" in res.stderr
    # kcat sees the same records
    seen = kcat_consume(b, name, 3).stdout.decode().splitlines()
    assert seen == ["0\t0\tk1\tv1", "0\t1\tk2\tv2", "0\t2\t\tplain"]
    out = _ok(josef("console-consumer", "--bootstrap-server", b, "--topic", name,
                    "--partition", "0", "--offset", "1", "--timeout-ms", "1500",
                    "--property", "print.timestamp=true"))
    got = out.splitlines()
    assert len(got) == 2 and got[0].startswith("CreateTime:") and got[0].endswith("\tv2")
    res = josef("console-consumer", "--bootstrap-server", b, "--topic", name,
                "--timeout-ms", "500")
    assert res.returncode == 0 and res.stdout == b""
    bad = josef("console-producer", "--bootstrap-server", b, "--topic", name,
                "--property", "parse.key=true", input=b"nokey\n")
    assert bad.returncode == 1 and b"no key separator" in bad.stderr


def test_console_producer_from_file_keyed_partitioning(shared_broker, tmp_path):
    b = shared_broker.bootstrap
    name = _topic()
    _ok(josef("topics", "--bootstrap-server", b, "--create", "--topic", name,
              "--partitions", "4"))
    data = tmp_path / "in.txt"
    data.write_text("".join(f"key-{i % 10}:value-{i}\n" for i in range(3000)))
    res = josef("console-producer", "--bootstrap-server", b, "--topic", name,
                "--input-file", str(data), "--property", "parse.key=true",
                "--property", "key.separator=:", "--progress", "--batch-size", "4096")
    _ok(res)
    assert b"100.0%" in res.stderr  # forced progress bar
    out = _ok(josef("get-offsets", "--bootstrap-server", b, "--topic", name))
    ends = {int(line.split(":")[1]): int(line.split(":")[2]) for line in out.splitlines()}
    assert sum(ends.values()) == 3000
    # the same key always lands on the partition Kafka's murmur2 partitioner picks
    from client.producer import key_partition
    expected: dict[int, int] = {}
    for i in range(3000):
        p = key_partition(b"key-%d" % (i % 10), 4)
        expected[p] = expected.get(p, 0) + 1
    assert ends == {p: expected.get(p, 0) for p in range(4)}


def test_get_offsets_and_delete_records(shared_broker, tmp_path):
    require_tool("kcat")
    b = shared_broker.bootstrap
    name = _topic()
    _ok(josef("topics", "--bootstrap-server", b, "--create", "--topic", name))
    kcat_produce(b, name, [b"m%d" % i for i in range(8)])
    assert _ok(josef("get-offsets", "--bootstrap-server", b, "--topic", name)) == \
        f"{name}:0:8\n"
    assert _ok(josef("get-offsets", "--bootstrap-server", b, "--topic", name,
                     "--time", "-2")) == f"{name}:0:0\n"
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": name, "partition": 0, "offset": 5}],
                                "version": 1}))
    out = _ok(josef("delete-records", "--bootstrap-server", b, "--offset-json-file",
                    str(spec)))
    assert out == ("Executing records delete operation\nRecords delete operation completed:\n"
                   f"partition: {name}-0\tlow_watermark: 5\n")
    assert _ok(josef("get-offsets", "--bootstrap-server", b, "--topic", name,
                     "--time", "earliest")) == f"{name}:0:5\n"
    spec.write_text(json.dumps({"partitions": [{"topic": name, "partition": 0,
                                                "offset": 99}], "version": 1}))
    res = josef("delete-records", "--bootstrap-server", b, "--offset-json-file", str(spec))
    assert res.returncode == 1 and b"error: OFFSET_OUT_OF_RANGE" in res.stdout


def test_dump_log_reads_live_segment(shared_broker):
    b = shared_broker.bootstrap
    name = _topic()
    _ok(josef("topics", "--bootstrap-server", b, "--create", "--topic", name))
    _ok(josef("console-producer", "--bootstrap-server", b, "--topic", name,
              input=b"".join(b"line-%d\n" % i for i in range(50))))
    seg = shared_broker.log_dir / f"{name}-0" / "00000000000000000000.log"
    out = _ok(josef("dump-log", "--files", f"{seg},{seg.with_suffix('.index')},"
                    f"{seg.with_suffix('.timeindex')}", "--deep-iteration",
                    "--print-data-log"))
    assert "crcValid: true" in out and "crcValid: false" not in out
    assert "| offset: 49 " in out and "payload: line-49" in out


def test_consumer_groups_describe_reset_delete(shared_broker):
    import warnings

    b = shared_broker.bootstrap
    name = _topic("grp")
    group = f"g-{uuid.uuid4().hex[:6]}"
    _ok(josef("topics", "--bootstrap-server", b, "--create", "--topic", name))
    _ok(josef("console-producer", "--bootstrap-server", b, "--topic", name,
              input=b"".join(b"%d\n" % i for i in range(20))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP
        from kafka.structs import OffsetAndMetadata
        c = KafkaConsumer(bootstrap_servers=b, group_id=group, enable_auto_commit=False)
        try:
            c.commit({KTP(name, 0): OffsetAndMetadata(12, "", -1)})
        finally:
            c.close()
    assert group in _ok(josef("consumer-groups", "--bootstrap-server", b, "--list")).split()
    res = josef("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group)
    out = _ok(res)
    assert f"Consumer group '{group}' has no active members." in res.stderr.decode()
    rows = [line.split() for line in out.splitlines() if line.startswith(group)]
    assert rows == [[group, name, "0", "12", "20", "8", "-", "-", "-"]]
    assert out.startswith("\nGROUP           TOPIC           PARTITION  CURRENT-OFFSET  ")
    # issue 27 point 8: --members (--verbose), --state, a missing group, an unknown flag
    res = josef("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group,
                "--members", "--verbose")
    assert _ok(res).split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                "ASSIGNMENT"]
    res = josef("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group,
                "--state")
    lines = _ok(res).strip().splitlines()
    assert lines[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                "#MEMBERS"]
    assert lines[1].split()[0] == group and lines[1].split()[-2:] == ["Empty", "0"]
    res = josef("consumer-groups", "--bootstrap-server", b, "--describe", "--group",
                group + "-typo")
    assert res.returncode == 1 and res.stdout == b""
    assert f"Error: Consumer group '{group}-typo' does not exist." in res.stderr.decode()
    res = josef("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group,
                "--no-such-flag")
    assert res.returncode == 2
    assert res.stderr.decode().startswith("usage: josef consumer-groups ")
    assert "unrecognized arguments: --no-such-flag" in res.stderr.decode()
    dry = _ok(josef("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group",
                    group, "--topic", name, "--shift-by", "-2"))
    assert [line.split() for line in dry.splitlines() if line.startswith(group)] == \
        [[group, name, "0", "10"]]
    _ok(josef("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group,
              "--topic", name, "--to-earliest", "--execute"))
    out = _ok(josef("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group))
    rows = [line.split() for line in out.splitlines() if line.startswith(group)]
    assert rows[0][3:6] == ["0", "20", "20"]
    out = _ok(josef("consumer-groups", "--bootstrap-server", b, "--delete", "--group", group))
    assert out == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    assert group not in _ok(josef("consumer-groups", "--bootstrap-server", b,
                                  "--list")).split()


def test_console_consumer_group_resumes_from_committed(shared_broker):
    b = shared_broker.bootstrap
    name = _topic("ccg")
    group = f"cg-{uuid.uuid4().hex[:6]}"
    _ok(josef("topics", "--bootstrap-server", b, "--create", "--topic", name))
    _ok(josef("console-producer", "--bootstrap-server", b, "--topic", name,
              input=b"".join(b"r%d\n" % i for i in range(10))))
    first = _ok(josef("console-consumer", "--bootstrap-server", b, "--topic", name,
                      "--group", group, "--from-beginning", "--max-messages", "4"))
    assert first.split() == ["r0", "r1", "r2", "r3"]
    rest = _ok(josef("console-consumer", "--bootstrap-server", b, "--topic", name,
                     "--group", group, "--timeout-ms", "1500"))
    assert rest.split() == [f"r{i}" for i in range(4, 10)]
