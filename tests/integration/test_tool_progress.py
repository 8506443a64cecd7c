"""The final line of each tool's progress bar (forced with ``--progress``, since stderr is a
pipe here): console-consumer (records, records/s, lag left), delete-records (records
removed, partitions), dump-log and console-producer (bytes). Log-dir moves and
``reassign-partitions --verify`` are checked in test_log_dir_move.py / test_zk_failover.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid

import pytest

from tests.integration.harness import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

RECORDS_RATE = r"\[\d\d:\d\d, [\d.]+[kMG]? records/s"
BYTES_RATE = r"\[\d\d:\d\d, [\d.]+[kMG]?B/s\]"


def josef(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "broker.cli", *args], input=input,
                         capture_output=True, timeout=90, cwd=REPO_ROOT)
    assert res.returncode == 0, (res.stdout, res.stderr)
    return res


def final_bar(stderr: bytes, label: str) -> str:
    """The last redraw of the bar whose line starts with ``label:`` (without the spaces tqdm
    pads a redraw with when it is shorter than the one before, to clear the line)."""
    frames = [f for f in re.split(r"[\r\n]", stderr.decode()) if f.startswith(f"{label}:")]
    assert frames, stderr
    return frames[-1].rstrip(" ")


@pytest.fixture
def topic(shared_broker) -> str:
    """Two partitions with 60 records each."""
    b = shared_broker.bootstrap
    name = f"progress-{uuid.uuid4().hex[:8]}"
    josef("topics", "--bootstrap-server", b, "--create", "--topic", name, "--partitions", "2")
    for p in (0, 1):
        josef("console-producer", "--bootstrap-server", b, "--topic", name, "--partition",
              str(p), input=b"".join(b"record-%d\n" % i for i in range(60)))
    return name


def test_console_consumer_max_messages_bar(shared_broker, topic):
    res = josef("console-consumer", "--bootstrap-server", shared_broker.bootstrap,
                "--topic", topic, "--from-beginning", "--max-messages", "100", "--progress")
    assert len(res.stdout.splitlines()) == 100
    line = final_bar(res.stderr, topic)
    # 100 of the 120 records printed: 20 left behind the positions reached
    assert re.fullmatch(rf"{topic}: 100\.0%\|[^|]+\| 100/100 records {RECORDS_RATE}, lag 20\]",
                        line), line
    assert res.stderr.decode().rstrip().endswith("Processed a total of 100 messages")


def test_console_consumer_timeout_bar(shared_broker, topic):
    res = josef("console-consumer", "--bootstrap-server", shared_broker.bootstrap,
                "--topic", topic, "--partition", "1", "--offset", "10", "--timeout-ms",
                "1000", "--progress")
    assert len(res.stdout.splitlines()) == 50
    line = final_bar(res.stderr, topic)
    assert re.fullmatch(rf"{topic}: 50 records {RECORDS_RATE}, lag 0\]", line), line


def test_console_consumer_no_bar_unless_asked(shared_broker, topic):
    """stderr is not a terminal and --progress is absent: no bar, Kafka's output only."""
    res = josef("console-consumer", "--bootstrap-server", shared_broker.bootstrap,
                "--topic", topic, "--from-beginning", "--max-messages", "5")
    assert res.stderr.decode() == "Processed a total of 5 messages\n"


def test_delete_records_bar(shared_broker, topic, tmp_path):
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 25},
        {"topic": topic, "partition": 1, "offset": -1}]}))
    res = josef("delete-records", "--bootstrap-server", shared_broker.bootstrap,
                "--offset-json-file", str(spec), "--progress")
    assert f"partition: {topic}-1\tlow_watermark: 60" in res.stdout.decode()
    line = final_bar(res.stderr, "delete-records")
    assert re.fullmatch(rf"delete-records: 100\.0%\|[^|]+\| 85/85 records {RECORDS_RATE}, "
                        r"2/2 partitions\]", line), line


def test_dump_log_and_producer_bars(shared_broker, tmp_path):
    b = shared_broker.bootstrap
    name = f"progress-{uuid.uuid4().hex[:8]}"
    josef("topics", "--bootstrap-server", b, "--create", "--topic", name)
    data = tmp_path / "in.txt"
    data.write_text("".join(f"value-{i:06d}\n" for i in range(5000)))  # 65,000 bytes
    res = josef("console-producer", "--bootstrap-server", b, "--topic", name,
                "--input-file", str(data), "--progress")
    line = final_bar(res.stderr, name)
    assert re.fullmatch(rf"{name}: 100\.0%\|[^|]+\| 63\.5kB/63\.5kB {BYTES_RATE}", line), line
    seg = shared_broker.log_dir / f"{name}-0" / "00000000000000000000.log"
    size = seg.stat().st_size
    res = josef("dump-log", "--files", str(seg), "--progress")
    assert "crcValid: true" in res.stdout.decode()
    line = final_bar(res.stderr, seg.name)
    from cli._progress import human_bytes
    assert re.fullmatch(rf"{seg.name}: 100\.0%\|[^|]+\| {re.escape(human_bytes(size))}/"
                        rf"{re.escape(human_bytes(size))} {BYTES_RATE}", line), (line, size)
