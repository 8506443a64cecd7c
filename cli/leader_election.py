"""``josef leader-election``: preferred or unclean leader elections (like kafka-leader-election.sh).

Options as Kafka's: ``--election-type PREFERRED|UNCLEAN``, one of ``--topic T --partition P``,
``--path-to-json-file F`` (``{"partitions":[{"topic":"t","partition":0},...]}``) or
``--all-topic-partitions``. Output lines as Kafka's: "Successfully completed leader election
(PREFERRED) for partitions t-0, t-1", "Valid replica already elected for partitions ...",
"Error completing leader election (PREFERRED) for partition: t-0: <exception>"; exit code 1
when a partition could not be elected ("<n> replica(s) could not be elected").

API: ElectLeaders (v1+ carries the election type), sent to the controller.
"""

from __future__ import annotations

import argparse
import json

from cli._common import UsageError, add_bootstrap, connect, tool_main
from client.admin import AdminRouter
from client.connection import ToolError, error_name

COMMAND = "leader-election"
HELP = "Elect preferred or unclean partition leaders (like kafka-leader-election.sh)"

ELECT_LEADERS = 43
ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
ELECTION_NOT_NEEDED = 84


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--election-type", required=True, type=str.upper,
                   choices=sorted(ELECTION_TYPES), help="PREFERRED or UNCLEAN")
    p.add_argument("--topic", help="the topic of --partition")
    p.add_argument("--partition", type=int, help="the partition of --topic")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='{"partitions":[{"topic":"t","partition":0}]}')
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="elect for every partition")


def parse_election_json(text: str) -> list[tuple[str, int]]:
    """The partitions of a replica election JSON file (Kafka's format)."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ToolError(f"The input string is not a valid JSON: {e}") from None
    if not doc:
        raise ToolError("Replica election data is empty")
    if not isinstance(doc, dict) or "partitions" not in doc:
        raise ToolError('Replica election data is missing "partitions" field')
    out = []
    for item in doc["partitions"]:
        try:
            out.append((str(item["topic"]), int(item["partition"])))
        except (KeyError, TypeError, ValueError):
            raise ToolError(f"bad partition entry {item!r}") from None
    dups = sorted({tp for tp in out if out.count(tp) > 1})
    if dups:
        raise ToolError("Replica election data contains duplicate partitions: "
                        + ",".join(f"{t}-{p}" for t, p in dups))
    return out


def _partitions(args) -> list[tuple[str, int]] | None:
    chosen = sum(bool(x) for x in (args.path_to_json_file, args.topic is not None,
                                   args.all_topic_partitions))
    if chosen != 1:
        raise UsageError("exactly one of --topic/--partition, --path-to-json-file or "
                         "--all-topic-partitions is required")
    if args.topic is not None and args.partition is None:
        raise UsageError("Missing required option(s): partition")
    if args.partition is not None and args.topic is None:
        raise UsageError("Option partition is only allowed if topic is used")
    if args.path_to_json_file:
        try:
            with open(args.path_to_json_file, encoding="utf-8") as f:
                return parse_election_json(f.read())
        except OSError as e:
            raise ToolError(f"cannot read {args.path_to_json_file}: {e.strerror}") from None
    if args.topic is not None:
        return [(args.topic, args.partition)]
    return None


def exception_name(code: int) -> str:
    """Kafka's exception class name for an error code (PREFERRED_LEADER_NOT_AVAILABLE ->
    org.apache.kafka.common.errors.PreferredLeaderNotAvailableException)."""
    name = "".join(w.capitalize() for w in error_name(code).split("_"))
    return f"org.apache.kafka.common.errors.{name}Exception"


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    wanted = _partitions(args)
    etype = args.election_type
    body: dict = {"election_type": ELECTION_TYPES[etype], "timeout_ms": 30000,
                  "topic_partitions": None}
    if wanted is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in wanted:
            by_topic.setdefault(t, []).append(p)
        body["topic_partitions"] = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
    with connect(args) as client:
        resp = AdminRouter(client).controller(ELECT_LEADERS, body, errors=lambda r: [
            r.error_code] + [p.error_code for t in r.replica_election_results
                             for p in t.partition_result])
    if getattr(resp, "error_code", 0):
        raise ToolError(f"leader election failed: {error_name(resp.error_code)}")
    done, noop, failed = [], [], []
    for t in resp.replica_election_results:
        for p in t.partition_result:
            tp = f"{t.topic}-{p.partition_id}"
            if p.error_code == 0:
                done.append(tp)
            elif p.error_code == ELECTION_NOT_NEEDED:
                noop.append(tp)
            else:
                failed.append((tp, p.error_code, p.error_message))
    if done:
        print(f"Successfully completed leader election ({etype}) for partitions "
              + ", ".join(done))
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(noop))
    for tp, code, msg in failed:
        print(f"Error completing leader election ({etype}) for partition: {tp}: "
              f"{exception_name(code)}: {msg or error_name(code)}")
    if failed:
        raise ToolError(f"{len(failed)} replica(s) could not be elected")
    return 0
