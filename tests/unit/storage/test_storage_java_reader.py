"""A segment we write is read by Apache Kafka's own `FileRecords` (kafka-clients jar):
every batch passes `ensureValid()` (CRC) with our offsets, timestamps and leader epoch."""

import importlib.util
import os
import shutil
import subprocess

import pytest

from protocol.record_builder import RecordBatchBuilder
from storage.config import LogConfig

pytestmark = pytest.mark.java

JAVA = """
import org.apache.kafka.common.record.*;
import java.io.File;
public class SegmentDump {
  public static void main(String[] args) throws Exception {
    FileRecords fr = FileRecords.open(new File(args[0]));
    for (FileLogInputStream.FileChannelRecordBatch b : fr.batches()) {
      b.ensureValid();
      long n = 0;
      for (org.apache.kafka.common.record.Record r : b) { n++; }
      System.out.println(b.baseOffset() + " " + b.lastOffset() + " " + b.maxTimestamp() + " "
          + b.partitionLeaderEpoch() + " " + b.checksum() + " " + n);
    }
    fr.close();
  }
}
"""


def kafka_classpath():
    """kafka-clients.jar (+ slf4j-api.jar) from the installed pyflink/lib, or None."""
    spec = importlib.util.find_spec("pyflink")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = os.path.join(list(spec.submodule_search_locations)[0], "lib")
    jars = [os.path.join(lib, j) for j in ("kafka-clients.jar", "slf4j-api.jar")]
    return os.pathsep.join(jars) if all(os.path.exists(j) for j in jars) else None


def test_kafka_file_records_reads_our_segment(make_log, tmp_path, clock):
    jar, javac = kafka_classpath(), shutil.which("javac")
    if not jar or not javac:
        pytest.skip("needs javac and kafka-clients.jar")
    src = tmp_path / "SegmentDump.java"
    src.write_text(JAVA)
    subprocess.run([javac, "-cp", jar, "-d", str(tmp_path), str(src)], check=True,
                   capture_output=True, timeout=120)
    log = make_log(LogConfig(index_interval_bytes=256))
    expected = []
    for i in range(30):
        b = RecordBatchBuilder(compression_type=1 if i % 3 == 0 else 0)
        for j in range(1 + i % 4):
            b.append(clock.now + 10 * i + j, b"k", b"v" * (i * 7))
        info = log.append_as_leader(bytearray(b.build()), leader_epoch=9)
        expected.append((info.first_offset, info.last_offset, info.max_timestamp, 9,
                         info.last_offset - info.first_offset + 1))
    log.flush()
    out = subprocess.run(["java", "-cp", f"{tmp_path}{os.pathsep}{jar}", "SegmentDump",
                          log.active_segment.log_path], check=True, capture_output=True,
                         text=True, timeout=120).stdout.split("\n")
    got = [tuple(int(x) for x in ln.split()) for ln in out if ln.strip()]
    assert [(g[0], g[1], g[2], g[3], g[5]) for g in got] == expected
