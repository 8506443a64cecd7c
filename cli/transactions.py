"""``josef transactions``: inspect and repair transactions, like ``kafka-transactions.sh``
(Kafka's TransactionsCommand; KIP-664).

``josef transactions --bootstrap-server B <command> ...`` (the option may also follow the
command):

- ``list [--duration-filter MS]``: ListTransactions on every broker::

    TransactionalId  Coordinator  ProducerId  TransactionState

- ``describe --transactional-id ID``: FindCoordinator (key type 1) and DescribeTransactions::

    CoordinatorId  TransactionalId  ProducerId  ProducerEpoch  TransactionState
    TransactionTimeoutMs  CurrentTransactionStartTimeMs  TransactionDurationMs  TopicPartitions

  (start time and duration "None" when no transaction runs).
- ``describe-producers --topic T --partition P [--broker-id N]``: DescribeProducers on the
  leader (or that replica)::

    ProducerId  ProducerEpoch  LatestCoordinatorEpoch  LastSequence  LastTimestamp
    CurrentTransactionStartOffset

- ``find-hanging (--topic T [--partition P] | --broker-id N) [--max-transaction-timeout
  MIN]``: open transactions (DescribeProducers) older than MIN minutes (default 15) whose
  producer is unknown to every transaction coordinator, or whose coordinator does not list
  the partition in the transaction (ListTransactions by producer id, DescribeTransactions)::

    Topic  Partition  ProducerId  ProducerEpoch  CoordinatorEpoch  StartOffset
    LastTimestamp  Duration(min)

- ``abort --topic T --partition P (--start-offset O | --producer-id I --producer-epoch E
  --coordinator-epoch C)``: writes an ABORT marker for that producer on the partition leader
  (WriteTxnMarkers, as Kafka's Admin.abortTransaction); with ``--start-offset`` the producer
  is looked up with DescribeProducers. A coordinator epoch below 0 becomes 0.

Requests go where Kafka's AdminClient sends them (``client.admin.AdminRouter``: the
transaction coordinator, found again when it moves; partition leaders, asked again after a
leader change). Tables are Kafka's (columns padded to their widest cell, tab-separated).
Errors: one line ("Failed to ...: ERROR_NAME") and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from cli._common import UsageError, check_error, tool_main
from client.admin import COORDINATOR_TRANSACTION, AdminRouter
from client.connection import KafkaClient, ToolError, error_name

COMMAND = "transactions"
HELP = "List, describe, find hanging and abort transactions (like kafka-transactions.sh)"
WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


def _bootstrap_args(p: argparse.ArgumentParser, top: bool) -> None:
    kw = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="the broker(s) to "
                   "connect to", **({"default": None} if top else kw))
    p.add_argument("--command-timeout-ms", type=int, metavar="MS",
                   help="socket timeout of each request (default 30000)",
                   **({"default": 30000} if top else kw))


def add_arguments(p: argparse.ArgumentParser) -> None:
    _bootstrap_args(p, True)
    sub = p.add_subparsers(dest="action", required=True, metavar="COMMAND")
    lst = sub.add_parser("list", help="list transactions")
    lst.add_argument("--duration-filter", type=int, default=None, metavar="MS",
                     help="only transactions running longer than this (ms)")
    desc = sub.add_parser("describe", help="describe the state of an active transactional-id")
    desc.add_argument("--transactional-id", required=True)
    prod = sub.add_parser("describe-producers",
                          help="describe the states of active producers for a topic partition")
    prod.add_argument("--topic", required=True)
    prod.add_argument("--partition", type=int, required=True)
    prod.add_argument("--broker-id", type=int, default=None)
    hang = sub.add_parser("find-hanging", help="find hanging transactions")
    hang.add_argument("--broker-id", type=int, default=None)
    hang.add_argument("--topic", default=None)
    hang.add_argument("--partition", type=int, default=None)
    hang.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                      help="maximum transaction timeout in minutes (default 15)")
    ab = sub.add_parser("abort", help="abort a hanging transaction")
    ab.add_argument("--topic", required=True)
    ab.add_argument("--partition", type=int, required=True)
    ab.add_argument("--start-offset", type=int, default=None)
    ab.add_argument("--producer-id", type=int, default=None)
    ab.add_argument("--producer-epoch", type=int, default=None)
    ab.add_argument("--coordinator-epoch", type=int, default=None)
    for s in (lst, desc, prod, hang, ab):
        _bootstrap_args(s, False)


def print_table(headers: list[str], rows: list[list[str]], out=None) -> None:
    """Kafka's ToolsUtils.prettyPrintTable: every cell padded to its column's width, then a
    tab."""
    out = out or sys.stdout
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    for r in [headers, *rows]:
        out.write("".join(c.ljust(w) + "\t" for c, w in zip(r, widths, strict=True)) + "\n")


# --- lookups ---------------------------------------------------------------------------------
def _list(client: KafkaClient, producer_ids=(), duration: int | None = None
          ) -> list[tuple[int, object]]:
    body = {"state_filters": [], "producer_id_filters": list(producer_ids)}
    if duration is not None and client.version_for(LIST_TRANSACTIONS) >= 1:
        body["duration_filter"] = duration
    rows = []
    for node, resp in AdminRouter(client).each_broker(LIST_TRANSACTIONS, body).items():
        if isinstance(resp, ToolError):
            raise ToolError(f"Failed to list transactions on broker {node}: {resp}")
        check_error(resp.error_code, None, "Failed to list transactions")
        rows.extend((node, s) for s in resp.transaction_states)
    return rows


def _describe(client: KafkaClient, txn_id: str):
    router = AdminRouter(client)
    resp = router.coordinator(txn_id, DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn_id]},
                              key_type=COORDINATOR_TRANSACTION,
                              errors=lambda r: [s.error_code for s in r.transaction_states])
    return router.find_coordinator(txn_id, COORDINATOR_TRANSACTION), resp.transaction_states[0]


def _producers(client: KafkaClient, tps: list[tuple[str, int]], broker_id: int | None
               ) -> dict[tuple[str, int], list]:
    """(topic, partition) -> DescribeProducers rows, asking each partition's leader (resent
    after a leader change) or ``broker_id``."""
    def build(parts):
        topics: dict[str, list[int]] = {}
        for t, p in parts:
            topics.setdefault(t, []).append(p)
        return {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}

    def results(resp):
        for t in resp.topics:
            for p in t.partitions:
                yield (t.name, p.partition_index), p.error_code, p

    router = AdminRouter(client)
    if broker_id is None:
        got = router.to_leaders(DESCRIBE_PRODUCERS, tps, build, results)
    else:
        got = {tp: (code, p) for tp, code, p in results(
            router.broker(broker_id, DESCRIBE_PRODUCERS, build(tps)))}
    where = f"broker {broker_id}" if broker_id is not None else "leader"
    out = {}
    for (t, p), (code, item) in sorted(got.items()):
        check_error(code, getattr(item, "error_message", None),
                    f"Failed to describe producers for partition {t}-{p} on {where}")
        out[(t, p)] = item.active_producers
    return out


# --- commands ----------------------------------------------------------------------------------
def cmd_list(client: KafkaClient, args) -> int:
    rows = [[s.transactional_id, str(node), str(s.producer_id), s.transaction_state]
            for node, s in _list(client, duration=args.duration_filter)]
    print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


def cmd_describe(client: KafkaClient, args) -> int:
    node, s = _describe(client, args.transactional_id)
    check_error(s.error_code, None, "Failed to describe transaction state of "
                f"transactional-id `{args.transactional_id}`")
    if s.transaction_start_time_ms >= 0:
        start = str(s.transaction_start_time_ms)
        duration = str(int(time.time() * 1000) - s.transaction_start_time_ms)
    else:
        start = duration = "None"
    tps = ",".join(f"{t.topic}-{p}" for t in s.topics for p in t.partitions)
    print_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                 "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                 "TransactionDurationMs", "TopicPartitions"],
                [[str(node), args.transactional_id, str(s.producer_id), str(s.producer_epoch),
                  s.transaction_state, str(s.transaction_timeout_ms), start, duration, tps]])
    return 0


def cmd_describe_producers(client: KafkaClient, args) -> int:
    tp = (args.topic, args.partition)
    rows = []
    for p in _producers(client, [tp], args.broker_id)[tp]:
        rows.append([str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
                     str(p.last_sequence), str(p.last_timestamp),
                     "None" if p.current_txn_start_offset < 0
                     else str(p.current_txn_start_offset)])
    print_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                 "LastTimestamp", "CurrentTransactionStartOffset"], rows)
    return 0


def _partitions_to_search(client: KafkaClient, args) -> list[tuple[str, int]]:
    if args.topic is not None and args.partition is not None:
        return [(args.topic, args.partition)]
    md = client.metadata([args.topic] if args.topic is not None else None)
    out = []
    for t in md.topics:
        check_error(t.error_code, None, f"Failed to describe topic {t.name}")
        for p in t.partitions:
            if args.broker_id is None or args.broker_id in p.replica_nodes:
                out.append((t.name, p.partition_index))
    return sorted(out)


def cmd_find_hanging(client: KafkaClient, args) -> int:
    if args.topic is None and args.broker_id is None:
        raise UsageError("The `find-hanging` command requires either --topic or --broker-id "
                         "to limit the scope of the search")
    if args.partition is not None and args.topic is None:
        raise UsageError("The --partition argument requires --topic to be provided")
    max_ms = args.max_transaction_timeout * 60000
    now = int(time.time() * 1000)
    candidates = []
    tps = _partitions_to_search(client, args)
    if tps:
        for tp, producers in sorted(_producers(client, tps, args.broker_id).items()):
            for p in producers:
                if p.current_txn_start_offset >= 0 and now - p.last_timestamp > max_ms:
                    candidates.append((tp, p))
    hanging = []
    if candidates:
        pids = {p.producer_id for _, p in candidates}
        txn_ids = {s.producer_id: s.transactional_id for _, s in _list(client, pids)
                   if s.producer_id in pids}
        described = {}
        for txn_id in set(txn_ids.values()):
            _, s = _describe(client, txn_id)
            if s.error_code == 0:
                described[txn_id] = {(t.topic, p) for t in s.topics for p in t.partitions}
            elif s.error_code != 105:  # TRANSACTIONAL_ID_NOT_FOUND: unknown = hanging
                raise ToolError(f"Failed to describe transaction {txn_id}: "
                                f"{error_name(s.error_code)}")
        for tp, p in candidates:
            txn_id = txn_ids.get(p.producer_id)
            if txn_id is None or txn_id not in described or tp not in described[txn_id]:
                hanging.append((tp, p))
    rows = [[t, str(part), str(p.producer_id), str(p.producer_epoch),
             str(p.coordinator_epoch), str(p.current_txn_start_offset), str(p.last_timestamp),
             str((now - p.last_timestamp) // 60000)] for (t, part), p in hanging]
    print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                 "StartOffset", "LastTimestamp", "Duration(min)"], rows)
    return 0


def cmd_abort(client: KafkaClient, args) -> int:
    tp = (args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise UsageError("The transaction to abort must be identified either with "
                         "--start-offset (for brokers on 3.0 or above) or with --producer-id, "
                         "--producer-epoch, and --coordinator-epoch (for older brokers)")
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise UsageError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise UsageError("Missing required argument --coordinator-epoch")
        pid, epoch, cepoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    else:
        found = [p for p in _producers(client, [tp], None)[tp]
                 if p.current_txn_start_offset == args.start_offset]
        if not found:
            raise ToolError(f"Could not find any open transactions starting at offset "
                            f"{args.start_offset} on partition {tp[0]}-{tp[1]}")
        pid, epoch, cepoch = found[0].producer_id, found[0].producer_epoch, \
            found[0].coordinator_epoch
    cepoch = max(cepoch, 0)
    def build(parts):
        return {"markers": [{
            "producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
            "coordinator_epoch": cepoch,
            "topics": [{"name": t, "partition_indexes": [p]} for t, p in parts]}]}

    def results(resp):
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    yield (t.name, p.partition_index), p.error_code, p

    for (t, p), (code, _) in AdminRouter(client).to_leaders(WRITE_TXN_MARKERS, [tp], build,
                                                            results).items():
        check_error(code, None, f"Failed to abort transaction of producer "
                    f"{pid} (epoch {epoch}) on {t}-{p}")
    return 0


COMMANDS = {"list": cmd_list, "describe": cmd_describe,
            "describe-producers": cmd_describe_producers, "find-hanging": cmd_find_hanging,
            "abort": cmd_abort}


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    if not args.bootstrap_server:
        raise UsageError("the following arguments are required: --bootstrap-server")
    with KafkaClient(args.bootstrap_server, timeout=args.command_timeout_ms / 1000.0) as client:
        return COMMANDS[args.action](client, args)
