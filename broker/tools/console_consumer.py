"""``josef console-consumer``: print records, like ``kafka-console-consumer.sh``.

Start position: ``--offset N|earliest|latest`` (needs ``--partition``, as in Kafka), else
``--from-beginning`` (earliest), else the latest offset. Stops after ``--max-messages`` or
when no record arrived for ``--timeout-ms``; prints "Processed a total of N messages" on
stderr, as Kafka's tool does.

Output follows Kafka's DefaultMessageFormatter: optional fields in the order timestamp
(``CreateTime:ts`` / ``LogAppendTime:ts`` / ``NO_TIMESTAMP``), ``Partition:p``, ``Offset:o``,
headers (``k:v,k2:v2`` or ``NO_HEADERS``), key, then the value; fields separated by TAB
(``key.separator``), records by a newline (``line.separator``); null prints as ``null``
(``null.literal``). Properties: print.timestamp, print.partition, print.offset,
print.headers, print.key, print.value, key.separator, line.separator, headers.separator,
headers.key.separator, null.literal.

Isolation level 0 (READ_UNCOMMITTED), the console consumer's default; control batches are
skipped. ``--group g``: starts each partition at the group's committed offset (partitions
without one start as above) and commits the positions reached when it stops
(FindCoordinator, OffsetFetch, OffsetCommit with generation -1). It reads every partition
itself: it does not join the group (no JoinGroup/SyncGroup), so two console consumers of one
group do not split partitions, unlike Kafka's. APIs: Metadata, ListOffsets, Fetch (v4-v12).
"""

from __future__ import annotations

import argparse
import sys
import time

from broker.tools._client import ToolError, error_name
from broker.tools._common import UsageError, add_bootstrap, connect, partition_leaders, tool_main
from broker.tools._offsets import EARLIEST, LATEST, list_offsets

COMMAND = "console-consumer"
HELP = "Print records of a topic (like kafka-console-consumer.sh)"
FETCH = 1
OFFSET_OUT_OF_RANGE = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--topic", required=True, help="the topic to read")
    p.add_argument("--partition", type=int, metavar="N", help="read only this partition")
    p.add_argument("--offset", default=None, metavar="N|earliest|latest",
                   help="start offset (needs --partition)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset instead of the latest")
    p.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="stop when no record arrived for this long")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="print.key, print.offset, print.timestamp, print.headers, "
                        "print.partition, print.value, key.separator, line.separator, "
                        "headers.separator, headers.key.separator, null.literal")
    p.add_argument("--group", metavar="GROUP",
                   help="start from the group's committed offsets and commit on exit "
                        "(does not join the group)")


class Formatter:
    """Kafka's DefaultMessageFormatter (see the module docstring for the layout)."""

    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str, default: bool = False) -> bool:
            return props.get(name, str(default)).lower() == "true"

        self.timestamp = flag("print.timestamp")
        self.partition = flag("print.partition")
        self.offset = flag("print.offset")
        self.headers = flag("print.headers")
        self.key = flag("print.key")
        self.value = flag("print.value", True)
        self.sep = props.get("key.separator", "\t")
        self.line_sep = props.get("line.separator", "\n")
        self.headers_sep = props.get("headers.separator", ",")
        self.header_key_sep = props.get("headers.key.separator", ":")
        self.null = props.get("null.literal", "null")

    def _text(self, b) -> str:
        return self.null if b is None else bytes(b).decode("utf-8", errors="replace")

    def format(self, partition: int, record, timestamp_type: int) -> str:
        out = []
        if self.timestamp:
            if record.timestamp < 0:
                out.append("NO_TIMESTAMP")
            else:
                kind = "LogAppendTime" if timestamp_type == 1 else "CreateTime"
                out.append(f"{kind}:{record.timestamp}")
        if self.partition:
            out.append(f"Partition:{partition}")
        if self.offset:
            out.append(f"Offset:{record.offset}")
        if self.headers:
            hs = record.headers or []
            out.append(self.headers_sep.join(
                f"{k}{self.header_key_sep}{self._text(v)}" for k, v in hs)
                if hs else "NO_HEADERS")
        if self.key:
            out.append(self._text(record.key))
        if self.value:
            out.append(self._text(record.value))
        return self.sep.join(out) + self.line_sep


def _props(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise UsageError(f"--property needs key=value, got {item!r}")
        out[k.strip()] = v.encode().decode("unicode_escape") if "\\" in v else v
    return out


def _start_offsets(client, args, tps, leaders) -> dict[tuple[str, int], int]:
    if args.offset is not None:
        if args.partition is None:
            raise UsageError("--offset needs --partition")
        text = args.offset.lower()
        if text in ("earliest", "latest"):
            return list_offsets(client, tps, EARLIEST if text == "earliest" else LATEST,
                                leaders)
        try:
            n = int(text)
        except ValueError:
            raise UsageError(f"--offset must be a number, earliest or latest, "
                             f"not {args.offset!r}") from None
        if n < 0:
            raise UsageError("--offset must not be negative")
        return {tp: n for tp in tps}
    return list_offsets(client, tps, EARLIEST if args.from_beginning else LATEST, leaders)


def _records(buf, fetch_offset: int):
    """(record, timestamp_type) of data batches at or after ``fetch_offset``."""
    from protocol.records import iter_batches_lenient

    if buf is None:
        return
    for batch in iter_batches_lenient(buf):
        if batch.is_control:
            yield None, batch.next_offset
            continue
        for r in batch.iter_records():
            if r.offset >= fetch_offset:
                yield (r, batch.timestamp_type), r.offset + 1
        yield None, batch.next_offset


def _commit(client, node: int, group: str, positions: dict[tuple[str, int], int]) -> None:
    """Commit ``positions`` for ``group`` as a standalone consumer (generation -1)."""
    version = client.version_for(8, max_version=7)
    topics: dict[str, list] = {}
    for (t, p), off in sorted(positions.items()):
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                         "committed_metadata": ""})
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    if 2 <= version <= 4:
        body["retention_time_ms"] = -1
    resp = client.request(8, body, version=version, node=node)
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                raise ToolError(f"commit of {t.name}-{p.partition_index} for group {group} "
                                f"failed: {error_name(p.error_code)}")


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    if args.group and args.offset is not None:
        raise UsageError("--offset cannot be used with --group")
    fmt = Formatter(_props(args.property))
    out = sys.stdout
    count = 0
    try:
        with connect(args) as client:
            leaders = partition_leaders(client, [args.topic])
            if args.partition is not None:
                leaders = {tp: n for tp, n in leaders.items() if tp[1] == args.partition}
                if not leaders:
                    raise ToolError(f"topic {args.topic} has no partition {args.partition}")
            tps = sorted(leaders)
            positions = _start_offsets(client, args, tps, leaders)
            coordinator = None
            if args.group:
                from broker.tools.consumer_groups import _committed, _coordinator

                coordinator = _coordinator(client, args.group)
                committed = _committed(client, coordinator, args.group)
                positions.update({tp: off for tp, off in committed.items() if tp in positions})
            version = client.version_for(FETCH, max_version=12)
            if version < 4:
                raise ToolError("the broker's Fetch is too old (needs v4+)")
            last_data = time.monotonic()
            max_wait = 500 if args.timeout_ms is None else max(min(500, args.timeout_ms), 1)
            while args.max_messages is None or count < args.max_messages:
                got = False
                by_leader: dict[int, list] = {}
                for tp in tps:
                    by_leader.setdefault(leaders[tp], []).append(tp)
                for leader, group in by_leader.items():
                    resp = client.request(FETCH, {
                        "replica_id": -1, "max_wait_ms": max_wait, "min_bytes": 1,
                        "max_bytes": 50 << 20, "isolation_level": 0, "session_id": 0,
                        "session_epoch": -1,
                        "topics": [{"topic": args.topic, "partitions": [
                            {"partition": p, "fetch_offset": positions[(t, p)],
                             "partition_max_bytes": 1 << 20} for t, p in group]}],
                        "forgotten_topics_data": [], "rack_id": ""},
                        version=version, node=leader)
                    for t in resp.responses:
                        for pr in t.partitions:
                            tp = (args.topic, pr.partition_index)
                            if pr.error_code == OFFSET_OUT_OF_RANGE:
                                positions.update(list_offsets(
                                    client, [tp], EARLIEST if args.from_beginning else LATEST,
                                    leaders))
                                continue
                            if pr.error_code:
                                raise ToolError(f"fetch {tp[0]}-{tp[1]}: "
                                                f"{error_name(pr.error_code)}")
                            for item, nxt in _records(pr.records, positions[tp]):
                                positions[tp] = max(positions[tp], nxt)
                                if item is None:
                                    continue
                                got = True
                                out.write(fmt.format(tp[1], item[0], item[1]))
                                count += 1
                                if args.max_messages is not None and count >= args.max_messages:
                                    break
                            if args.max_messages is not None and count >= args.max_messages:
                                break
                out.flush()
                now = time.monotonic()
                if got:
                    last_data = now
                elif args.timeout_ms is not None and (now - last_data) * 1000 >= args.timeout_ms:
                    break
            if coordinator is not None:
                _commit(client, coordinator, args.group, positions)
    finally:
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
