"""The example pipeline (examples/spark_pipeline.py) end to end, output checked."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import uuid

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "spark_pipeline.py"


def load_example():
    spec = importlib.util.spec_from_file_location("josef_spark_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_pipeline_output(spark_local, kafka, tmp_path):
    # local[2] only: on the standalone cluster the same example runs under spark-submit
    # (test_spark_cluster.py::test_example_pipeline_submitted_to_the_cluster).
    spark = spark_local
    example = load_example()
    events, counts = example.create_topics(kafka.bootstrap, f"example-{uuid.uuid4().hex[:8]}")
    example.produce_events(kafka.bootstrap, events)
    query = example.start_query(spark, kafka.bootstrap, events, counts, str(tmp_path / "ckpt"))
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None

    results = [json.loads(m.value()) for m in kafka.consume_all(counts, 1, expected=15)]
    got = {(r["window_start"], r["action"]): r["count"] for r in results}
    assert len(results) == len(got)  # each window and action written once (append mode)
    # Independent of the example's own helper: 600 events, 2 per second from 00:00:00,
    # actions cycling view,view,view,click,click,buy -> per minute 60 view, 40 click, 20 buy.
    want = {(f"2024-01-01T00:0{m}:00Z", action): n
            for m in range(5) for action, n in (("view", 60), ("click", 40), ("buy", 20))}
    assert got == want
    assert example.expected_counts() == want
    assert all(r["window_end"] == r["window_start"][:15] + str(int(r["window_start"][15]) + 1)
               + ":00Z" for r in results)
    table = example.format_results(results).splitlines()
    assert table[1] == "2024-01-01T00:00:00Z  2024-01-01T00:01:00Z  buy        20"
