"""Fixtures for the Spark connector tests: a live broker, a SparkSession, Kafka helpers.

The broker: ``JOSEF_TEST_BOOTSTRAP=host:port`` points the tests at a running cluster (any
Kafka-protocol broker); otherwise the Josef broker is started through
``tests/integration/harness.py`` once ``broker/server.py`` exists, and the tests are skipped
before that. Spark: the source and sink tests run twice, on a local[2] session and on a
session of a standalone cluster (master and two workers on 127.0.0.1, :mod:`standalone`,
started once per run), with ``PYSPARK_PYTHON`` = this interpreter and
``SPARK_LOCAL_IP=127.0.0.1``.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory):
    """``host:port`` of a live broker for the session (see module docstring)."""
    external = os.environ.get("JOSEF_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    if not (REPO / "broker" / "server.py").exists():
        pytest.skip("Josef broker not built yet (broker/server.py missing) and "
                    "JOSEF_TEST_BOOTSTRAP not set")
    from tests.integration.harness import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("spark_broker"),
                           {"num.partitions": "1", "auto.create.topics.enable": "true"})
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


SPARK_MODES = [m for m in os.environ.get("JOSEF_SPARK_MODES", "local,cluster").split(",") if m]
"""Where the source/sink tests run: ``local`` (local[2] in this process) and ``cluster`` (a
standalone cluster, :mod:`standalone`); ``JOSEF_SPARK_MODES=local`` skips the cluster."""


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone cluster (master + 2 workers, 1 core each) on 127.0.0.1, started on
    first use and stopped by PID at the end of the session."""
    pytest.importorskip("pyspark")
    from tests.integration.spark.standalone import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark_cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


class SparkSessions:
    """The one SparkSession of this process (Spark allows one SparkContext at a time),
    switched between local[2] and the standalone cluster on demand."""

    def __init__(self, request) -> None:
        self.request = request
        self.mode: str | None = None
        self.session = None

    def get(self, mode: str):
        if mode == self.mode:
            return self.session
        self.release()
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        # Python planner workers of streaming sources import `connectors` from PYTHONPATH.
        paths = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                               if p]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        from pyspark.sql import SparkSession

        from connectors.spark import register

        builder = (
            SparkSession.builder.appName(f"josef-spark-tests-{mode}")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.streaming.stopTimeout", "30s")
            # Python workers start slowly on a loaded machine (the default is 15 s).
            .config("spark.python.authenticate.socketTimeout", "120s")
        )
        if mode == "cluster":
            cluster = self.request.getfixturevalue("spark_cluster")
            builder = (builder.master(cluster.master_url)
                       .config("spark.executor.memory", "512m")
                       .config("spark.executor.cores", "1")
                       .config("spark.cores.max", "2"))
        else:
            builder = builder.master("local[2]")
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        # On the cluster, executors get the connector only from the shipped zip.
        register(session, ship_code=mode == "cluster")
        self.mode, self.session = mode, session
        return session

    def release(self) -> None:
        """Stop the current session (and so its executors on the cluster)."""
        if self.session is not None:
            for query in self.session.streams.active:
                query.stop()
            self.session.stop()
        self.mode = self.session = None


@pytest.fixture(scope="session")
def spark_sessions(request):
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    sessions = SparkSessions(request)
    yield sessions
    sessions.release()


def _session_order(item) -> int:
    """0: local[2] tests, 1: tests on this process's cluster session, 2: spark-submit
    tests (they release the session and want the cluster idle)."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("spark_mode") == "cluster":
        return 1
    return 2 if "cluster" in getattr(item, "fixturenames", ()) else 0


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Run the Spark tests local first, then cluster, then spark-submit (a stable sort
    within the slots the Spark tests already hold; other tests keep their places): one
    SparkSession start per mode instead of one per module and mode. Tests marked
    ``spark_cluster_only`` (the longest streaming ones, whose local[2] run adds nothing the
    cluster run and the other local tests do not check) run on the cluster only, unless
    ``JOSEF_SPARK_ALL_MODES=1`` or the cluster is not among ``JOSEF_SPARK_MODES``."""
    if os.environ.get("JOSEF_SPARK_ALL_MODES") != "1" and "cluster" in SPARK_MODES:
        dropped = [item for item in items
                   if item.get_closest_marker("spark_cluster_only") is not None
                   and getattr(item, "callspec", None) is not None
                   and item.callspec.params.get("spark_mode", "cluster") != "cluster"]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            gone = set(map(id, dropped))
            items[:] = [item for item in items if id(item) not in gone]
    here = pathlib.Path(__file__).parent
    slots = [i for i, item in enumerate(items) if here in pathlib.Path(item.path).parents]
    ordered = sorted((items[i] for i in slots), key=_session_order)
    for slot, item in zip(slots, ordered, strict=True):
        items[slot] = item


@pytest.fixture(scope="session", params=SPARK_MODES)
def spark_mode(request) -> str:
    """``local`` or ``cluster``. Session-scoped so that pytest runs every module's [local]
    tests, then every module's [cluster] tests: the SparkSession is switched (a stop and a
    start, executors included) about twice per run instead of twice per module."""
    return request.param


@pytest.fixture
def spark(spark_mode, spark_sessions):
    """A SparkSession with the ``josef`` format: local[2], then the standalone cluster
    (each source/sink test runs in both). Looked up per test (cheap while the mode stays),
    since spark-submit tests release the session in between."""
    return spark_sessions.get(spark_mode)


@pytest.fixture
def spark_local(spark_sessions):
    """The local[2] SparkSession, for tests that need no cluster."""
    return spark_sessions.get("local")


class KafkaTool:
    """Plain confluent-kafka helpers (no Spark) to set up and check topics."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})

    def new_topic(self, prefix: str, partitions: int) -> str:
        from confluent_kafka.admin import NewTopic

        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        for future in self.admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until metadata shows every partition
            topic = self.admin.list_topics(timeout=10).topics.get(name)
            if topic is not None and len(topic.partitions) == partitions:
                return name
            time.sleep(0.1)
        raise TimeoutError(f"topic {name} did not appear")

    def produce(self, topic: str, records) -> None:
        """Produce ``(partition, key, value, headers, timestamp_ms)`` tuples, acks=all.

        The last record of every partition is sent alone after a flush, so it is a batch of
        one: Tansu 0.6 (used before the Josef broker exists) answers ListOffsets "latest"
        with the last batch's base offset + 1. Harmless for a correct broker.
        """
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 20,
                             "batch.num.messages": 5000, "log_level": 3})
        errors = []

        def report(err, _msg):
            if err is not None:
                errors.append(err)

        last: dict[int, tuple] = {}
        for record in records:
            partition = record[0]
            if partition in last:
                self._send(producer, topic, last[partition], report)
            last[partition] = record
        producer.flush(60)
        for record in last.values():
            self._send(producer, topic, record, report)
            producer.flush(60)
        assert not errors, errors[:3]
        assert len(producer) == 0

    @staticmethod
    def _send(producer, topic, record, report) -> None:
        partition, key, value, headers, ts = record
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition,
                                 headers=headers, timestamp=ts or 0, on_delivery=report)
                producer.poll(0)
                return
            except BufferError:
                producer.poll(0.05)

    def end_offsets(self, topic: str, partitions: int) -> dict[int, int]:
        """High watermark of each partition of ``topic`` (ListOffsets latest)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "w-" + topic,
                             "enable.auto.commit": False, "log_level": 3})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                    for p in range(partitions)}
        finally:
            consumer.close()

    def consume_all(self, topic: str, partitions: int, expected: int,
                    linger_s: float = 1.0, timeout_s: float = 60.0) -> list:
        """Records of ``topic`` from offset 0: waits until ``expected`` have arrived, then
        ``linger_s`` more seconds so that extra (e.g. duplicate) records are seen too."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "t-" + topic,
                             "enable.auto.commit": False, "log_level": 3})
        try:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
            out = []
            deadline = time.monotonic() + timeout_s
            linger_until = None
            while time.monotonic() < deadline:
                if linger_until is None and len(out) >= expected:
                    linger_until = time.monotonic() + linger_s
                if linger_until is not None and time.monotonic() > linger_until:
                    break
                out.extend(m for m in consumer.consume(1000, timeout=0.2) if not m.error())
            return out
        finally:
            consumer.close()


@pytest.fixture(scope="session")
def kafka(kafka_bootstrap) -> KafkaTool:
    return KafkaTool(kafka_bootstrap)
