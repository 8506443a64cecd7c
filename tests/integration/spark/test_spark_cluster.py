"""Applications spark-submitted to the standalone cluster (master + 2 workers on loopback):
the example pipeline, and a streaming copy killed mid-stream (SIGKILL of the driver and
everything below it) and restarted from its checkpoint: no gap, no duplicate."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
import uuid

import pytest

from tests.integration.spark.standalone import kill_tree, spark_submit

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLE = HERE.parents[2] / "examples" / "spark_pipeline.py"


@pytest.fixture
def cluster(spark_cluster, spark_sessions):
    """The cluster with no application of this process on it (spark-submitted drivers get
    both workers' cores)."""
    if "cluster" not in os.environ.get("JOSEF_SPARK_MODES", "local,cluster"):
        pytest.skip("JOSEF_SPARK_MODES excludes the cluster")
    spark_sessions.release()
    spark_cluster.wait_idle()
    return spark_cluster


def wait_and_watch(proc: subprocess.Popen, cluster, timeout: float) -> set[int]:
    """Wait for ``proc``; returns the executor JVM PIDs seen while it ran."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            kill_tree(proc.pid)
            proc.wait(30)
            raise TimeoutError(f"spark-submit did not finish in {timeout:g}s")
        seen.update(cluster.executor_jvms())
        time.sleep(0.5)
    return seen


def test_example_pipeline_submitted_to_the_cluster(cluster, kafka, tmp_path):
    from importlib import util

    spec = util.spec_from_file_location("josef_spark_example", EXAMPLE)
    example = util.module_from_spec(spec)
    spec.loader.exec_module(example)
    prefix = f"example-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "stdout.txt"
    with open(out, "wb") as stdout:
        proc = spark_submit(cluster.master_url, str(EXAMPLE), [
            "--bootstrap", kafka.bootstrap, "--prefix", prefix,
            "--checkpoint", str(tmp_path / "ckpt")], stdout=stdout, stderr=subprocess.STDOUT)
        executors = wait_and_watch(proc, cluster, 600)
    text = out.read_text(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    # Executors in separate JVMs, one per worker (the driver is this spark-submit).
    assert len(executors) >= 2 and proc.pid not in executors, (executors, text[-2000:])
    lines = text.splitlines()
    head = lines.index(f"15 results in {prefix}-counts:")
    table = lines[head + 1: head + 17]
    want = example.format_results([
        {"window_start": start, "window_end": start[:15] + str(int(start[15]) + 1) + ":00Z",
         "action": action, "count": count}
        for (start, action), count in example.expected_counts().items()]).splitlines()
    assert table == want
    assert f"produced 600 events (+3 ticks) to {prefix}-events" in lines


def checkpoint_state(checkpoint: pathlib.Path) -> tuple[int, int]:
    """(micro-batches planned, micro-batches committed) in a query's checkpoint."""
    def count(sub: str) -> int:
        d = checkpoint / sub
        return len([p for p in d.iterdir() if p.name.isdigit()]) if d.exists() else 0
    return count("offsets"), count("commits")


def test_query_killed_mid_stream_restarts_without_gap_or_duplicate(cluster, kafka, tmp_path):
    source = kafka.new_topic("spark-kill-in", 3)
    sink = kafka.new_topic("spark-kill-out", 2)
    total, per_trigger = 2000, 500
    batches = total // per_trigger
    kafka.produce(source, [(i % 3, b"k%d" % i, b"v%d" % i, None, None) for i in range(total)])
    checkpoint = tmp_path / "ckpt"
    job = [str(HERE / "copy_job.py"), kafka.bootstrap, source, sink, str(checkpoint),
           str(per_trigger)]

    log1 = open(tmp_path / "run1.txt", "wb")
    first = spark_submit(cluster.master_url, job[0], job[1:], stdout=log1,
                         stderr=subprocess.STDOUT)
    try:
        # Kill once two micro-batches are committed and the next one is planned.
        deadline = time.monotonic() + 600
        while True:
            planned, committed = checkpoint_state(checkpoint)
            if committed >= 2 and planned > committed:
                break
            assert first.poll() is None, (tmp_path / "run1.txt").read_text()[-3000:]
            assert committed < batches, "killed too late: the job had finished"
            assert time.monotonic() < deadline, "the copy job made no progress"
            time.sleep(0.05)
    finally:
        kill_tree(first.pid)
        first.wait(30)
        log1.close()
    planned, committed = checkpoint_state(checkpoint)
    assert committed < batches, "killed too late: the job had finished"
    cluster.wait_idle(120)  # the master tells the workers to kill the dead driver's executors

    with open(tmp_path / "run2.txt", "wb") as log2:
        second = spark_submit(cluster.master_url, job[0], [*job[1:], "--available-now"],
                              stdout=log2, stderr=subprocess.STDOUT)
        wait_and_watch(second, cluster, 600)
    text = (tmp_path / "run2.txt").read_text(errors="replace")
    assert second.returncode == 0, text[-3000:]
    # The restart went on from the checkpoint: it replayed at most the batch in flight.
    last = json.loads((checkpoint / "offsets" / str(max(
        int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())))
        .read_text().splitlines()[-1])
    assert sum(last[source].values()) == total

    values = [m.value() for m in kafka.consume_all(sink, 2, expected=total, linger_s=2)]
    assert len(values) == total and set(values) == {b"v%d" % i for i in range(total)}, (
        f"{len(values)} records, {len(set(values))} distinct (planned {planned}, "
        f"committed {committed} at the kill)")
