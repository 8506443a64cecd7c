"""Every ``josef`` admin tool against a broker that is not the controller (issue 27 point 5).

A 3-broker ZooKeeper cluster; each tool is given only a non-controller broker as
``--bootstrap-server``, so requests Kafka's AdminClient sends elsewhere (CreateTopics,
DeleteTopics, CreatePartitions, ElectLeaders, reassignments and UpdateFeatures to the
controller; group and transaction requests to their coordinator; ListOffsets, DeleteRecords,
DescribeProducers, Produce to partition leaders; broker configs to that broker) must be
routed there by ``client.admin.AdminRouter``. Halfway, the controller is made to move
(its ``/controller`` znode deleted): the tools follow it.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import uuid

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def josef(c, broker_id: int, *args: str, stdin: str = "", expect: int = 0) -> str:
    """Run ``josef`` in this process against broker ``broker_id`` only; its stdout."""
    from broker.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_stdin, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([*args, "--bootstrap-server", c.broker(broker_id).bootstrap])
            except SystemExit as e:
                code = e.code
    finally:
        sys.stdin = old_stdin
    assert code == expect, f"josef {' '.join(args)} -> {code}\n{err.getvalue()}{out.getvalue()}"
    return out.getvalue()


def _other(c, controller: int) -> int:
    return next(i for i in c.ids if i != controller)


def test_every_tool_through_a_non_controller_broker(zk_cluster, tmp_path):
    c = zk_cluster
    controller = c.wait_for_controller()
    b = _other(c, controller)
    t = f"tools-{uuid.uuid4().hex[:6]}"
    group = f"g-{t}"

    # topics (CreateTopics, CreatePartitions: the controller)
    assert josef(c, b, "topics", "--create", "--topic", t, "--partitions", "3",
                 "--replication-factor", "3") == f"Created topic {t}.\n"
    c.wait_for_leaders(t, 3, timeout=60)
    assert t in josef(c, b, "topics", "--list").split()
    josef(c, b, "topics", "--alter", "--topic", t, "--partitions", "4")
    c.wait_for_leaders(t, 4, timeout=60)
    assert josef(c, b, "topics", "--describe", "--topic", t).count(f"\tTopic: {t}\t") == 4

    # configs: a topic (any broker), the controller's own broker configs (that broker)
    josef(c, b, "configs", "--alter", "--entity-type", "topics", "--entity-name", t,
          "--add-config", "retention.ms=86400000")
    assert "retention.ms=86400000" in josef(c, b, "configs", "--describe", "--entity-type",
                                            "topics", "--entity-name", t)
    josef(c, b, "configs", "--alter", "--entity-type", "brokers", "--entity-name",
          str(controller), "--add-config", "log.cleaner.backoff.ms=16000")
    assert "log.cleaner.backoff.ms=16000" in josef(
        c, b, "configs", "--describe", "--entity-type", "brokers", "--entity-name",
        str(controller))
    josef(c, b, "configs", "--alter", "--entity-type", "brokers", "--entity-name",
          str(controller), "--delete-config", "log.cleaner.backoff.ms")

    # records through the leaders; a group through its coordinator
    josef(c, b, "console-producer", "--topic", t,
          stdin="".join(f"{i}\n" for i in range(40)))
    offsets = josef(c, b, "get-offsets", "--topic", t)
    assert sum(int(line.rsplit(":", 1)[1]) for line in offsets.split()) == 40
    got = josef(c, b, "console-consumer", "--topic", t, "--from-beginning", "--group", group,
                "--max-messages", "40", "--timeout-ms", "20000")
    assert sorted(map(int, got.split())) == list(range(40))

    c.zk().delete("/controller")  # the controller moves (or is elected again)
    controller = c.wait_for_controller(timeout=30)
    b = _other(c, controller)

    assert group in josef(c, b, "consumer-groups", "--list").split()
    desc = josef(c, b, "consumer-groups", "--describe", "--group", group)
    rows = [r.split() for r in desc.splitlines() if r.startswith(group)]
    assert len(rows) == 4 and sum(int(r[3]) for r in rows) == 40
    assert josef(c, b, "consumer-groups", "--describe", "--group", group, "--state"
                 ).split()[-2:] == ["Empty", "0"]
    josef(c, b, "consumer-groups", "--reset-offsets", "--group", group, "--topic", t,
          "--to-earliest", "--execute")
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "offset": -1} for p in range(4)]}))
    out = josef(c, b, "delete-records", "--offset-json-file", str(spec))
    ends = {int(line.split(":")[1]): int(line.rsplit(":", 1)[1]) for line in offsets.split()}
    assert sorted(out.splitlines()[2:]) == [f"partition: {t}-{p}\tlow_watermark: {ends[p]}"
                                            for p in range(4)]
    josef(c, b, "consumer-groups", "--delete", "--group", group)

    # transactions (every broker, leaders), log dirs (every broker), client metrics
    assert josef(c, b, "transactions", "list").startswith("TransactionalId")
    assert josef(c, b, "transactions", "describe-producers", "--topic", t, "--partition",
                 "0").startswith("ProducerId")
    assert json.loads(josef(c, b, "log-dirs", "--describe").splitlines()[-1])["brokers"]
    josef(c, b, "client-metrics", "--alter", "--name", f"cm-{t}", "--metrics", "org.",
          "--interval", "60000")
    assert f"cm-{t}" in josef(c, b, "client-metrics", "--list").split()

    # the controller's APIs: features, elections, reassignment with a throttle
    josef(c, b, "features", "upgrade", "--feature", "group.version=1")
    assert "FinalizedVersionLevel: 1" in josef(c, b, "features", "describe")
    josef(c, b, "leader-election", "--election-type", "PREFERRED", "--topic", t,
          "--partition", "0")
    current = c.partition_state(t, 0)["isr"]
    plan = tmp_path / "plan.json"
    target = [current[-1], *current[:-1]]
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": 0, "replicas": target}]}))
    out = josef(c, b, "reassign-partitions", "--execute", "--reassignment-json-file",
                str(plan), "--throttle", "10000000")
    assert "The inter-broker throttle limit was set to 10000000 B/s" in out
    assert "Successfully started partition reassignment for " + f"{t}-0" in out
    deadline = time.monotonic() + 60
    while True:
        out = josef(c, b, "reassign-partitions", "--verify", "--reassignment-json-file",
                    str(plan))
        if "is completed" in out or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert f"Reassignment of partition {t}-0 is completed." in out
    assert "Clearing broker-level throttles on brokers 1,2,3" in out
    assert f"Clearing topic-level throttles on topic {t}" in out
    assert "No partition reassignments found." in josef(c, b, "reassign-partitions", "--list")

    josef(c, b, "topics", "--delete", "--topic", t)
    c.wait_until("topic deleted", lambda: t not in c.zk_children("/brokers/topics"),
                 timeout=60)
