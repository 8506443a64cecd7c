"""``python -m tests.faults run``: a cluster, the queue workload, the nemeses, the checker.

Phases: sweep leftovers of crashed runs; make the network (namespaces, else loopback/proxies);
start ZooKeeper (``--brokers`` >= 2) and the brokers; create the topic (RF = min(3, brokers),
``min.insync.replicas`` = min(2, brokers) unless given); run producers and consumers while
the nemesis applies its planned faults for ``--time-limit`` seconds; heal everything and
restart what is down; let the producers flush and the consumers catch up; read every partition
in full; check the history; write ``DIR/results.json``. Exit status 0 only when valid.

``DIR`` keeps ``history.jsonl``, ``results.json``, ``harness.log`` and each node's directory
(``nodes/<name>/``: server.properties, broker.out, its log dirs); a valid run's data
directories are removed, a failed run keeps everything for replay and diagnosis.
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.faults import nemesis as nem
from tests.faults.checker import check
from tests.faults.history import History
from tests.faults.net import (
    CLIENT,
    LoopbackNetwork,
    NamespaceNetwork,
    Network,
    namespaces_available,
)
from tests.faults.nodes import ZK_PORT, BrokerNode, ZooKeeperNode
from tests.faults.state import RunState, sweep
from tests.faults.txn_workload import TXN_TOPIC, TxnConsumerWorker, TxnProducerWorker
from tests.faults.workload import ConsumerWorker, ProducerWorker, final_read
from tests.integration.harness import BrokerStartError

log = logging.getLogger("tests.faults")

TOPIC = "faults"
GROUP = "faults-group"
ZK_CHROOT = "/josef-faults"


def _kv(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


class FaultCluster:
    """ZooKeeper (optional) and brokers ``1..n`` in ``network``; applies nemesis faults."""

    def __init__(self, out: Path, n: int, network: Network, state: RunState,
                 broker_props: dict[str, str], partitions: int) -> None:
        self.out, self.n, self.network, self.state = out, n, network, state
        self.partitions = partitions
        self.zk: ZooKeeperNode | None = None
        if n > 1:
            self.zk = ZooKeeperNode(out / "nodes" / "zk", "zk", network, state)
        self.brokers: dict[int, BrokerNode] = {}
        for i in range(1, n + 1):
            props = {
                "broker.id": str(i),
                "num.partitions": str(partitions),
                "default.replication.factor": str(min(3, n)),
                "offsets.topic.replication.factor": str(min(3, n)),
                "offsets.topic.num.partitions": "3",
                "transaction.state.log.replication.factor": str(min(3, n)),
                "transaction.state.log.min.isr": str(min(2, n)),
                "group.initial.rebalance.delay.ms": "0",
                "log.segment.bytes": str(1 << 20),
            }
            if self.zk is not None:
                props.update({
                    "zookeeper.connect": f"{self.zk_connect_for(f'b{i}')}{ZK_CHROOT}",
                    "zookeeper.session.timeout.ms": "6000",
                    "zookeeper.connection.timeout.ms": "15000",
                    "replica.lag.time.max.ms": "6000",
                    "controlled.shutdown.retry.backoff.ms": "200",
                })
            props.update(broker_props)
            self.brokers[i] = BrokerNode(out / "nodes" / f"b{i}", f"b{i}", network, state,
                                         props, i)
        self.down: set[int] = set()  # brokers a nemesis killed
        self.crashes: list[str] = []  # brokers found dead that no nemesis killed

    def zk_connect_for(self, node: str) -> str:
        host, port = self.network.connect_address(node, "zk", ZK_PORT)
        return f"{host}:{port}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in (
            self.network.connect_address(CLIENT, b.name, 9092) for b in self.brokers.values()))

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.zk is not None:
            self.zk.start()
        for b in self.brokers.values():
            b.start()

    def stop(self) -> None:
        for b in self.brokers.values():
            b.kill()
        if self.zk is not None:
            self.zk.kill()

    def check_alive(self) -> None:
        """Record brokers that died without a nemesis killing them (a crash)."""
        for i, b in self.brokers.items():
            if i not in self.down and b.proc is not None and b.proc.poll() is not None:
                msg = f"broker {i} exited with code {b.proc.returncode} on its own"
                if msg not in self.crashes:
                    log.error("%s; log tail:\n%s", msg, b.log_tail(30))
                    self.crashes.append(msg)
                    self.down.add(i)

    def restart(self, i: int, timeout: float = 60.0) -> None:
        """Start broker ``i`` again, retrying while it exits during startup: a broker restarted
        within the ZooKeeper session timeout finds its previous session's ephemeral
        ``/brokers/ids/<id>`` and stops, as Kafka's does, until that session expires."""
        b = self.brokers[i]
        if b.is_running():
            b.kill()
        deadline = time.monotonic() + timeout
        while True:
            try:
                b.start()
                break
            except BrokerStartError as e:
                if time.monotonic() > deadline:
                    raise
                log.info("broker %d did not start (%s); retrying", i, str(e).splitlines()[0])
                time.sleep(2.0)
        self.down.discard(i)

    def heal(self) -> None:
        """Undo everything: links, pauses, dead nodes."""
        self.network.heal()
        if self.zk is not None:
            self.zk.resume()
            if not self.zk.is_running():
                self.zk.start()
        for i, b in self.brokers.items():
            b.resume()
            if not b.is_running():
                self.restart(i)

    # ---- who is who ----------------------------------------------------------------------------
    def _metadata(self) -> Any:
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 3000,
                             "log_level": 0})
        return admin.list_topics(TOPIC, timeout=3)

    def roles(self, partition: int) -> tuple[int | None, list[int], int | None]:
        """(leader, followers, controller) as the cluster reports them now (None: unknown)."""
        try:
            md = self._metadata()
            p = md.topics[TOPIC].partitions[partition]
            leader = p.leader if p.leader >= 0 else None
            followers = [r for r in p.replicas if r != leader]
            controller = getattr(md, "controller_id", -1)
            return leader, followers, controller if controller and controller >= 0 else None
        except Exception as e:
            log.info("metadata for roles failed: %r", e)
            return None, [], None

    def pick(self, role: str, fault: nem.Fault) -> int:
        live = [i for i in self.brokers if i not in self.down and self.brokers[i].is_running()]
        if not live:
            raise RuntimeError("no live broker to target")
        leader, followers, controller = self.roles(fault.partition)
        if role == "leader" and leader in live:
            return leader
        if role == "controller" and controller in live:
            return controller
        if role == "follower":
            cands = [f for f in followers if f in live] or [i for i in live if i != leader]
            if cands:
                return cands[fault.choice % len(cands)]
        return live[fault.choice % len(live)]

    # ---- faults --------------------------------------------------------------------------------
    def apply(self, fault: nem.Fault, rng: random.Random) -> Callable[[], None]:
        self.check_alive()
        kind = fault.kind
        if kind == "kill":
            i = self.pick(fault.variant, fault)
            fault.detail = {"broker": i}
            self.down.add(i)
            self.brokers[i].kill()
            return lambda: self.restart(i)
        if kind == "pause":
            i = self.pick(fault.variant, fault)
            fault.detail = {"broker": i}
            self.brokers[i].pause()
            return self.brokers[i].resume
        if kind == "torn":
            i = self.pick(fault.variant, fault)
            self.down.add(i)
            self.brokers[i].kill()
            fault.detail = {"broker": i, **self._tear(i, fault, rng)}
            return lambda: self.restart(i)
        if kind == "zk":
            assert self.zk is not None
            fault.detail = {"zk": fault.variant}
            self.zk.kill() if fault.variant == "kill" else self.zk.stop()
            return self.zk.start
        if kind == "shrink-kill":
            return self._shrink_kill(fault)
        if kind == "partition":
            groups = self._partition_groups(fault)
            fault.detail = {"groups": groups}
            self.network.partition(groups)
            return self.network.heal
        raise ValueError(f"unknown nemesis {kind}")

    def _shrink_kill(self, fault: nem.Fault) -> Callable[[], None]:
        """Cut a leader from its followers (the ISR shrinks to it); the undo kills it, heals,
        and starts it again 5 s later (see ``nemesis``)."""
        partition, leader, followers = fault.partition, None, []
        _, _, controller = self.roles(fault.partition)
        for p in [fault.partition] + [q for q in range(self.partitions) if q != fault.partition]:
            lead, fol, _ = self.roles(p)
            if lead is not None and (leader is None or lead == controller):
                partition, leader, followers = p, lead, fol
                if lead == controller:
                    break
        if leader is None:
            raise RuntimeError("no partition leader to strand")
        fault.detail = {"partition": partition, "leader": leader, "followers": followers,
                        "controller": controller}
        for f in followers:
            self.network.cut(f"b{leader}", f"b{f}")

        def undo() -> None:
            self.down.add(leader)
            self.brokers[leader].kill()
            self.network.heal()
            time.sleep(5.0)
            self.restart(leader)

        return undo

    def _tear(self, i: int, fault: nem.Fault, rng: random.Random) -> dict[str, Any]:
        logs = self.brokers[i].log_dir
        dirs = sorted(logs.glob(f"{TOPIC}-*"))
        if not dirs:
            return {"tear": "no partition directory"}
        pdir = logs / f"{TOPIC}-{fault.partition}"
        if not pdir.is_dir():
            pdir = dirs[fault.choice % len(dirs)]
        segments = sorted(pdir.glob("*.log"))
        if not segments:
            return {"tear": "no segment"}
        return nem.tear(segments[-1], rng)

    def _partition_groups(self, fault: nem.Fault) -> list[list[str]]:
        names = [f"b{i}" for i in self.brokers]
        zk = ["zk"] if self.zk is not None else []
        rng = random.Random(fault.choice)
        v = fault.variant
        if v == "isolate-leader":
            i = self.pick("leader", fault)
            return [[f"b{i}"], [n for n in names if n != f"b{i}"] + zk]
        if v == "isolate-zk":
            i = self.pick("random", fault)
            return [[f"b{i}"], zk]
        if v == "bridge":
            nodes = names + zk
            rng.shuffle(nodes)
            half = len(nodes) // 2
            # the middle node hears both halves: cut only left <-> right
            left, right = nodes[:half], nodes[half + 1:]
            fault.detail["bridge"] = nodes[half]
            return [left, right]
        # majority-minority
        shuffled = names[:]
        rng.shuffle(shuffled)
        minority = shuffled[:max(1, (len(names) - 1) // 2)]
        majority = shuffled[len(minority):]
        (minority if rng.random() < 0.5 else majority).extend(zk)
        return [minority, majority]

    # ---- health ----------------------------------------------------------------------------------
    def wait_healthy(self, timeout: float) -> bool:
        """Every broker answers and every workload partition has a leader with a full ISR."""
        deadline = time.monotonic() + timeout
        want_isr = min(3, self.n)
        while time.monotonic() < deadline:
            try:
                md = self._metadata()
                parts = md.topics[TOPIC].partitions
                if len(parts) == self.partitions and all(
                        p.leader >= 0 and len(p.isrs) >= want_isr for p in parts.values()) \
                        and len(md.brokers) == self.n:
                    return True
            except Exception as e:
                log.info("waiting for a healthy cluster: %r", e)
            time.sleep(0.5)
        return False


def choose_network(kind: str, state: RunState, run_id: str, nodes: list[str], n: int,
                   rng: random.Random) -> Network:
    if kind == "auto":
        if n == 1:
            kind = "loopback"
        else:
            why = namespaces_available()
            kind = "netns" if why is None else "proxy"
            if why:
                log.warning("network namespaces unavailable (%s): using loopback proxies", why)
    if kind == "netns":
        net: Network = NamespaceNetwork(state, run_id, nodes, rng)
    elif kind == "proxy":
        from tests.faults.proxynet import ProxyNetwork
        net = ProxyNetwork(nodes, state)
    else:
        net = LoopbackNetwork()
    net.setup()
    return net


def create_topic(bootstrap: str, partitions: int, rf: int, config: dict[str, str],
                 timeout: float = 60.0) -> None:
    create_topic_named(bootstrap, TOPIC, partitions, rf, config, timeout)


def create_topic_named(bootstrap: str, topic: str, partitions: int, rf: int,
                       config: dict[str, str], timeout: float = 60.0) -> None:
    """Create ``topic`` (retrying while the cluster settles; existing is fine)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        fut = admin.create_topics([NewTopic(topic, partitions, rf, config=config)],
                                  request_timeout=15)[topic]
        try:
            fut.result(timeout=20)
            return
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" in str(e) or "already exists" in str(e):
                return
            last = e
            time.sleep(1.0)
    raise RuntimeError(f"could not create topic {topic}: {last!r}")


def start_run_dir(out_arg: str, log_name: str) -> Path:
    """Create the run's directory and send the log (INFO and up; librdkafka's idempotence
    debug lines too, kafka-python's only from WARNING) to ``log_name`` there."""
    out = Path(out_arg)
    out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / log_name)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python's chatter
    # but its offset resets and truncation detection (a consumer moving backwards) stay
    logging.getLogger("kafka.consumer.fetcher").setLevel(logging.INFO)
    logging.getLogger("kafka.consumer.subscription_state").setLevel(logging.INFO)
    logging.getLogger("librdkafka").setLevel(logging.DEBUG)
    return out


def run(args: Any) -> int:
    out = start_run_dir(args.out, "harness.log")
    kinds = [k for k in args.nemesis.split(",") if k] if args.nemesis else []
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    n = args.brokers
    partitions = args.partitions
    for cleaned in sweep():
        log.warning("removed leftovers of crashed run %s", cleaned)

    run_id = secrets.token_hex(3)
    state = RunState(run_id)
    state.install_handlers()
    rng = random.Random(seed)
    nodes = [f"b{i}" for i in range(1, n + 1)] + (["zk"] if n > 1 else [])
    started = time.time()
    results: dict[str, Any] = {"seed": seed, "brokers": n, "nemesis": kinds,
                               "time_limit": args.time_limit, "run_id": run_id}
    history = History(out / "history.jsonl")
    cluster: FaultCluster | None = None
    network: Network | None = None
    workers: list[threading.Thread] = []
    stop_producers, stop_consumers, stop_nemesis = (threading.Event(), threading.Event(),
                                                    threading.Event())
    problems: list[str] = []
    try:
        network = choose_network(args.network, state, run_id, nodes, n, rng)
        results["network"] = network.kind
        problem = nem.applicable(kinds, n, n > 1, network.supports_cuts)
        if problem:
            raise SystemExit("; ".join(problem))
        rf = min(3, n) if args.replication_factor is None else args.replication_factor
        min_isr = min(2, n) if args.min_insync_replicas is None else args.min_insync_replicas
        topic_config = {"min.insync.replicas": str(min_isr), **_kv(args.topic_config)}
        if "torn" in kinds:
            topic_config.setdefault("flush.messages", "1")  # heavy fsync for torn writes
        results.update(replication_factor=rf, min_insync_replicas=min_isr,
                       topic_config=topic_config, partitions=partitions)
        cluster = FaultCluster(out, n, network, state, _kv(args.broker_config), partitions)
        log.info("run %s seed %d: %d broker(s), nemesis %s, network %s", run_id, seed, n,
                 kinds, network.kind)
        cluster.start()
        create_topic(cluster.bootstrap, partitions, rf, topic_config)
        if args.txn_producers:
            create_topic_named(cluster.bootstrap, TXN_TOPIC, partitions, rf,
                               {"min.insync.replicas": str(min_isr)})
        if not cluster.wait_healthy(60):
            problems.append("cluster not healthy before the workload started")

        bootstrap = cluster.bootstrap
        clients = ["confluent", "kafka-python"]
        for k in range(args.producers):
            client = clients[k % 2]
            workers.append(ProducerWorker(history, bootstrap, TOPIC, partitions,
                                          f"{'ck' if client == 'confluent' else 'kp'}{k}",
                                          client, args.rate, stop_producers))
        for k in range(args.consumers):
            client = clients[k % 2]
            workers.append(ConsumerWorker(history, bootstrap, TOPIC, GROUP,
                                          f"{'cc' if client == 'confluent' else 'kc'}{k}",
                                          client, stop_consumers))
        for k in range(args.txn_producers):
            workers.append(TxnProducerWorker(history, bootstrap, partitions, k, seed,
                                             args.txn_rate, stop_producers))
        if args.txn_producers:
            workers.append(TxnConsumerWorker(history, bootstrap, "tc0", stop_consumers))
        faults = nem.plan(kinds, args.time_limit, seed, n, partitions, n > 1)
        results["planned_faults"] = len(faults)
        t0 = time.monotonic()
        for w in workers:
            w.start()
        nemesis = nem.NemesisRunner(cluster, faults, history, seed, stop_nemesis, t0)
        nemesis.start()
        while time.monotonic() - t0 < args.time_limit:
            time.sleep(min(1.0, max(0.0, args.time_limit - (time.monotonic() - t0))))
            cluster.check_alive()
        stop_nemesis.set()
        nemesis.join(120)
        problems.extend(f"nemesis: {e}" for e in nemesis.errors)

        log.info("healing")
        cluster.check_alive()
        cluster.heal()
        if not cluster.wait_healthy(120):
            problems.append("cluster did not heal within 120 s (a partition without a "
                            "leader or a short ISR)")
        stop_producers.set()
        producers = [w for w in workers if isinstance(w, ProducerWorker)]
        for w in producers:
            w.join(30)
        for w in workers:
            if isinstance(w, TxnProducerWorker):
                w.join(120)  # finishes (commits or aborts) the transaction in hand
        for w in producers:
            left = w.flush(45)
            if left:
                log.warning("producer %s: %d sends unresolved", w.process, left)
        consumers = [w for w in workers if isinstance(w, ConsumerWorker | TxnConsumerWorker)]
        _let_consumers_catch_up(history, consumers, 20)
        stop_consumers.set()
        for w in consumers:
            w.join(30)
        for w in producers:
            w.close()
        if not final_read(history, cluster.bootstrap, TOPIC, partitions):
            problems.append("final read incomplete")
        if args.txn_producers and not final_read(history, cluster.bootstrap, TXN_TOPIC,
                                                 partitions, isolation="read_committed",
                                                 prefix="txn_"):
            problems.append("transactional final read incomplete")
        cluster.check_alive()
    except SystemExit:
        raise
    except Exception as e:
        log.exception("the run failed")
        problems.append(f"harness error: {e!r}")
    finally:
        stop_producers.set()
        stop_consumers.set()
        stop_nemesis.set()
        if cluster is not None:
            try:
                cluster.stop()
            except Exception:
                log.exception("stopping the cluster")
        if network is not None:
            try:
                network.teardown()
            except Exception:
                log.exception("removing the network")
        state.cleanup()
        history.close()

    results.update(check(history.events, range(partitions)))
    if cluster is not None:
        results["broker_crashes"] = len(cluster.crashes)
        problems.extend(cluster.crashes)
    results["problems"] = problems + results["problems"]
    results["valid"] = not results["problems"]
    results["duration_s"] = round(time.time() - started, 1)
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    if results["valid"] and not args.keep_data:
        for d in (out / "nodes").glob("*"):
            for data in ("kafka-logs", "data"):
                shutil.rmtree(d / data, ignore_errors=True)
    summary = {k: results.get(k) for k in ("valid", "acknowledged", "lost", "duplicated",
                                           "reordered", "nemesis_events", "seed")}
    print(json.dumps(summary), file=sys.stderr if not results["valid"] else sys.stdout)
    if not results["valid"]:
        print("problems: " + "; ".join(results["problems"]), file=sys.stderr)
    return 0 if results["valid"] else 1


def _let_consumers_catch_up(history: History, consumers: list, timeout: float) -> None:
    """Give the group time to read what was written (until polls stop growing)."""
    deadline = time.monotonic() + timeout
    last = -1
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        polled = sum(c.polled for c in consumers)
        if polled != last:
            last, quiet_since = polled, time.monotonic()
        elif time.monotonic() - quiet_since > 3.0:
            return
        time.sleep(0.25)
