"""``josef console-consumer``: print records, like ``kafka-console-consumer.sh``.

Start position: ``--offset N|earliest|latest`` (needs ``--partition``, as in Kafka), else
``--from-beginning`` (earliest), else the latest offset. Stops after ``--max-messages`` or
when no record arrived for ``--timeout-ms`` (counted from the first assignment when in a
group); prints "Processed a total of N messages" on stderr, as Kafka's tool does.

Output follows Kafka's DefaultMessageFormatter: optional fields in the order timestamp
(``CreateTime:ts`` / ``LogAppendTime:ts`` / ``NO_TIMESTAMP``), ``Partition:p``, ``Offset:o``,
headers (``k:v,k2:v2`` or ``NO_HEADERS``), key, then the value; fields separated by TAB
(``key.separator``), records by a newline (``line.separator``); null prints as ``null``
(``null.literal``). Properties: print.timestamp, print.partition, print.offset,
print.headers, print.key, print.value, key.separator, line.separator, headers.separator,
headers.key.separator, null.literal.

Isolation level 0 (READ_UNCOMMITTED), the console consumer's default; control batches are
skipped. APIs: Metadata, ListOffsets, Fetch (v4-v12).

``--group g`` (or ``group.id`` in ``--consumer-property``/``--consumer.config``): the tool
joins the group like any Kafka consumer (:mod:`client.group_member`: FindCoordinator,
JoinGroup, SyncGroup with the ``range`` assignor, background Heartbeat, LeaveGroup on exit),
so consumers of one group split the topic's partitions. Each assigned partition starts at
the group's committed offset, else per ``auto.offset.reset`` (``earliest`` with
``--from-beginning``, else ``latest``; ``none`` is an error, Kafka's
NoOffsetForPartitionException). Positions are committed every ``auto.commit.interval.ms``
(5000), before giving partitions up in a rebalance, and on exit (Ctrl-C, SIGTERM,
``--max-messages``, ``--timeout-ms``) unless ``enable.auto.commit=false``. Consumer
properties read: group.id, group.instance.id, session.timeout.ms (45000),
heartbeat.interval.ms (3000), max.poll.interval.ms (300000, the rebalance timeout),
auto.offset.reset, enable.auto.commit, auto.commit.interval.ms, client.id,
retry.backoff.ms; others are ignored. With ``--partition`` the tool reads that partition
without joining (Kafka's ``assign()``) and commits as a standalone consumer (generation -1).

A topic that does not exist yet is waited for, as Kafka's consumer does: its Metadata
requests say ``allow_auto_topic_creation=true`` (Kafka's ``allow.auto.create.topics``,
default true), so a broker with ``auto.create.topics.enable=true`` creates it (its first
answers, LEADER_NOT_AVAILABLE (5), are retried); a broker with auto-creation off answers
UNKNOWN_TOPIC_OR_PARTITION (3): the tool prints one warning (Kafka's "Error while fetching
metadata ... {T=UNKNOWN_TOPIC_OR_PARTITION}") and asks again every ``retry.backoff.ms``
(100), doubling up to ``retry.backoff.max.ms`` (1000, KIP-580), until the topic appears,
``--timeout-ms`` passes (exit code 0, "Processed a total of 0 messages") or Ctrl-C. With a
group the member joins once the topic exists.

Progress: with ``--max-messages`` or ``--timeout-ms``, a bar on stderr (when stderr is a
terminal and stdout is not, or with ``--progress``) counts records (percent of
``--max-messages``), records/s and the lag left (the fetched partitions' high watermarks
minus the positions reached), e.g.
``orders: 100.0%|####| 1000/1000 records [00:02, 480 records/s, lag 0]``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from cli._common import UsageError, add_bootstrap, connect, partition_leaders, tool_main
from cli._progress import ProgressBar
from client.connection import ToolError, error_name
from client.offsets import EARLIEST, LATEST, commit_offsets, list_offsets
from client.records import fetched_records

COMMAND = "console-consumer"
HELP = "Print records of a topic (like kafka-console-consumer.sh)"
FETCH = 1
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE = 3, 5


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
                   help="join this consumer group (members split the partitions) and "
                        "commit the positions reached")
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="consumer config, e.g. session.timeout.ms, auto.offset.reset, "
                        "group.instance.id, enable.auto.commit")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="a .properties file of consumer configs (--consumer-property wins)")
    p.add_argument("--progress", action="store_true",
                   help="with --max-messages or --timeout-ms: show the progress bar (records, "
                        "records/s, lag left) even when stderr is not a terminal")


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


def _consumer_config(args) -> dict[str, str]:
    """``--consumer.config`` file, then ``--consumer-property`` pairs on top."""
    out: dict[str, str] = {}
    if args.consumer_config:
        from common.properties import PropertiesError, load_properties

        try:
            out.update(load_properties(args.consumer_config))
        except (OSError, PropertiesError) as e:
            raise UsageError(f"cannot read --consumer.config {args.consumer_config}: "
                             f"{e}") from None
    for item in args.consumer_property:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise UsageError(f"--consumer-property needs key=value, got {item!r}")
        out[k.strip()] = v.strip()
    return out


def _int_config(cfg: dict[str, str], key: str, default: int) -> int:
    try:
        value = int(cfg.get(key, default))
    except ValueError:
        raise UsageError(f"{key} must be an integer, not {cfg[key]!r}") from None
    if value <= 0:
        raise UsageError(f"{key} must be positive")
    return value


def _group_id(args, cfg: dict[str, str]) -> str | None:
    """The group from --group or group.id; UsageError when they differ (as Kafka's tool)."""
    ids = {g for g in (args.group, cfg.get("group.id")) if g is not None}
    if len(ids) > 1:
        raise UsageError("The group ids provided in different places (directly using "
                         "'--group', using '--consumer-property', or using "
                         "'--consumer.config') do not match.")
    return ids.pop() if ids else None


def _reset_policy(args, cfg: dict[str, str]) -> str:
    """auto.offset.reset: ``earliest`` with --from-beginning, else the config or latest."""
    policy = cfg.get("auto.offset.reset", "earliest" if args.from_beginning else "latest")
    policy = policy.strip().lower()
    if policy not in ("earliest", "latest", "none"):
        raise UsageError(f"auto.offset.reset must be earliest, latest or none, not "
                         f"{policy!r}")
    if args.from_beginning and policy != "earliest":
        raise UsageError(f"Can't simultaneously specify --from-beginning and "
                         f"'auto.offset.reset={policy}', as they are conflicting.")
    return policy


# Fetch errors after which the leaders are looked up again (retriable in Kafka).
_REFRESH_LEADERS = frozenset({3, 5, 6, 74, 75})


class _Reader:
    """Fetch (v4-v12) of ``positions``' partitions from their leaders; prints records.

    ``positions`` maps (topic, partition) to the next offset to read and is advanced in
    place; :meth:`reset` gives new positions per auto.offset.reset (after
    OFFSET_OUT_OF_RANGE, or for a group's partitions without a committed offset)."""

    def __init__(self, client, fmt: Formatter, out, max_messages: int | None,
                 policy: str, bar: ProgressBar | None = None) -> None:
        self.client = client
        self.bar = bar
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self.fmt = fmt
        self.out = out
        self.max_messages = max_messages
        self.policy = policy
        self.count = 0
        self.leaders: dict[tuple[str, int], int] = {}
        self.version = client.version_for(FETCH, max_version=12)
        if self.version < 4:
            raise ToolError("the broker's Fetch is too old (needs v4+)")

    def done(self) -> bool:
        return self.max_messages is not None and self.count >= self.max_messages

    def reset(self, tps) -> dict[tuple[str, int], int]:
        if self.policy == "none":
            raise ToolError(f"no valid offset for {', '.join(f'{t}-{p}' for t, p in tps)} "
                            f"and auto.offset.reset=none (NoOffsetForPartitionException)")
        return list_offsets(self.client, list(tps),
                            EARLIEST if self.policy == "earliest" else LATEST,
                            self.leaders or None)

    def refresh_leaders(self, tps) -> None:
        self.leaders = partition_leaders(self.client, sorted({t for t, _ in tps}))

    def fetch(self, positions: dict[tuple[str, int], int], max_wait: int) -> bool:
        """One Fetch per leader; True when a record was printed."""
        got = False
        by_leader: dict[int, list] = {}
        for tp in sorted(positions):
            if tp not in self.leaders:
                self.refresh_leaders(positions)
            by_leader.setdefault(self.leaders.get(tp, -1), []).append(tp)
        if -1 in by_leader:
            time.sleep(max_wait / 1000.0)
            self.refresh_leaders(positions)
            return False
        for leader, tps in by_leader.items():
            topics: dict[str, list] = {}
            for t, p in tps:
                topics.setdefault(t, []).append({"partition": p, "fetch_offset": positions[(t, p)],
                                                 "partition_max_bytes": 1 << 20})
            resp = self.client.request(FETCH, {
                "replica_id": -1, "max_wait_ms": max_wait, "min_bytes": 1,
                "max_bytes": 50 << 20, "isolation_level": 0, "session_id": 0,
                "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [], "rack_id": ""},
                version=self.version, node=leader)
            for t in resp.responses:
                for pr in t.partitions:
                    tp = (t.topic, pr.partition_index)
                    if tp not in positions:
                        continue
                    if pr.error_code == OFFSET_OUT_OF_RANGE:
                        positions.update(self.reset([tp]))
                        continue
                    if pr.error_code in _REFRESH_LEADERS:
                        self.leaders.pop(tp, None)
                        continue
                    if pr.error_code:
                        raise ToolError(f"fetch {tp[0]}-{tp[1]}: {error_name(pr.error_code)}")
                    self.high_watermarks[tp] = pr.high_watermark
                    for item, nxt in fetched_records(pr.records, positions[tp]):
                        positions[tp] = max(positions[tp], nxt)
                        if item is None:
                            continue
                        got = True
                        self.out.write(self.fmt.format(tp[1], item[0], item[1]))
                        self.count += 1
                        if self.bar is not None:
                            self.bar.update(1)
                        if self.done():
                            break
                    if self.done():
                        break
                if self.done():
                    break
            if self.done():
                break
        self.out.flush()
        if self.bar is not None:
            self.bar.set_postfix(f"lag {self.lag(positions)}")
        return got

    def lag(self, positions: dict[tuple[str, int], int]) -> int:
        """Records left: the last fetched high watermarks minus the positions reached."""
        return sum(max(0, self.high_watermarks[tp] - off) for tp, off in positions.items()
                   if tp in self.high_watermarks)


def _warn(msg: str) -> None:
    print(f"josef {COMMAND}: warning: {msg}", file=sys.stderr, flush=True)


def _wait_for_topic(client, args, cfg: dict[str, str]) -> dict[tuple[str, int], int] | None:
    """Leaders of ``--topic``'s partitions once it exists; None when ``--timeout-ms`` passed
    first. Metadata asks the broker to auto-create the topic; LEADER_NOT_AVAILABLE (5, a
    topic being created) and UNKNOWN_TOPIC_OR_PARTITION (3, auto-creation off) are asked
    again after ``retry.backoff.ms``, doubling up to ``retry.backoff.max.ms``; the first
    UNKNOWN_TOPIC_OR_PARTITION prints one warning. Other errors raise ToolError."""
    backoff = _int_config(cfg, "retry.backoff.ms", 100) / 1000.0
    max_backoff = max(backoff, _int_config(cfg, "retry.backoff.max.ms", 1000) / 1000.0)
    deadline = None if args.timeout_ms is None else \
        time.monotonic() + args.timeout_ms / 1000.0
    warned = False
    while True:
        md = client.metadata([args.topic], auto_create=True)
        codes = {t.error_code for t in md.topics}
        if not codes & {UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE}:
            return partition_leaders(client, [args.topic], auto_create=True)
        if UNKNOWN_TOPIC_OR_PARTITION in codes and not warned:
            warned = True
            _warn(f"Error while fetching metadata: {{{args.topic}="
                  f"{error_name(UNKNOWN_TOPIC_OR_PARTITION)}}}; waiting for the topic "
                  f"to be created")
        pause = backoff
        if deadline is not None:
            pause = min(pause, deadline - time.monotonic())
            if pause <= 0:
                return None
        time.sleep(pause)
        backoff = min(backoff * 2, max_backoff)


def _max_wait(args) -> int:
    return 500 if args.timeout_ms is None else max(min(500, args.timeout_ms), 1)


def _idle_too_long(args, last_data: float) -> bool:
    return args.timeout_ms is not None and \
        (time.monotonic() - last_data) * 1000 >= args.timeout_ms


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    cfg = _consumer_config(args)
    group = _group_id(args, cfg)
    if group is not None and args.offset is not None:
        raise UsageError("Options group and offset cannot be specified together.")
    policy = _reset_policy(args, cfg)
    fmt = Formatter(_props(args.property))
    reader = None
    bar = None
    if args.max_messages is not None or args.timeout_ms is not None:
        bar = ProgressBar(args.max_messages, args.topic, unit="records",
                          force=args.progress or None, quiet_when_stdout_is_tty=True)
    try:
        with connect(args, cfg) as client:
            reader = _Reader(client, fmt, sys.stdout, args.max_messages, policy, bar)
            if group is not None and args.partition is None:
                _run_group(args, client, reader, group, cfg)
            else:
                _run_assigned(args, client, reader, group, cfg)
    finally:
        if bar is not None:
            bar.close()
        print(f"Processed a total of {reader.count if reader else 0} messages",
              file=sys.stderr)
    return 0


def _run_assigned(args, client, reader: _Reader, group: str | None,
                  cfg: dict[str, str]) -> None:
    """Read the topic's partitions (or ``--partition``) without joining a group; with a
    group, start at its committed offsets and commit on exit (generation -1)."""
    started = time.monotonic()
    leaders = _wait_for_topic(client, args, cfg)
    if leaders is None:
        return
    if args.partition is not None:
        leaders = {tp: n for tp, n in leaders.items() if tp[1] == args.partition}
        if not leaders:
            raise ToolError(f"topic {args.topic} has no partition {args.partition}")
    reader.leaders = dict(leaders)
    tps = sorted(leaders)
    positions = _start_offsets(client, args, tps, leaders)
    if group is not None:
        from client.groups import committed_offsets

        committed = committed_offsets(client, group)
        positions.update({tp: off for tp, off in committed.items() if tp in positions})
    last_data = started
    while not reader.done():
        if reader.fetch(positions, _max_wait(args)):
            last_data = time.monotonic()
        elif _idle_too_long(args, last_data):
            break
    if group is not None:
        commit_offsets(client, group, positions)


def _sigterm_as_interrupt():
    """Make SIGTERM end the run like Ctrl-C (so the group is committed and left, as Kafka's
    shutdown hook does); returns the previous handler, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def _run_group(args, client, reader: _Reader, group: str, cfg: dict[str, str]) -> None:
    """Consume as a member of ``group`` (see the module docstring)."""
    from client.group_member import GroupMember

    auto_commit = cfg.get("enable.auto.commit", "true").strip().lower() != "false"
    commit_interval = _int_config(cfg, "auto.commit.interval.ms", 5000) / 1000.0

    member = GroupMember(
        args.bootstrap_server, group, [args.topic],
        session_timeout_ms=_int_config(cfg, "session.timeout.ms", 45000),
        heartbeat_interval_ms=_int_config(cfg, "heartbeat.interval.ms", 3000),
        rebalance_timeout_ms=_int_config(cfg, "max.poll.interval.ms", 300000),
        group_instance_id=cfg.get("group.instance.id") or None,
        client_id=cfg.get("client.id", "console-consumer"),
        request_timeout_ms=args.command_timeout_ms,
        retry_backoff_ms=_int_config(cfg, "retry.backoff.ms", 100), warn=_warn,
        security=client.security)
    positions: dict[tuple[str, int], int] = {}
    committed: dict[tuple[str, int], int] = {}
    previous = None
    try:
        previous = _sigterm_as_interrupt()
        if _wait_for_topic(client, args, cfg) is None:
            return
        positions, committed = _assigned_positions(member, reader)
        last_data = last_commit = time.monotonic()
        while not reader.done():
            if member.rejoin_needed:
                if auto_commit and positions != committed:
                    member.commit(positions)
                positions = {}
                positions, committed = _assigned_positions(member, reader)
            if positions:
                got = reader.fetch(positions, _max_wait(args))
            else:
                time.sleep(_max_wait(args) / 1000.0)
                got = False
            now = time.monotonic()
            if got:
                last_data = now
            elif _idle_too_long(args, last_data):
                break
            if auto_commit and now - last_commit >= commit_interval:
                last_commit = now
                if positions != committed and member.commit(positions):
                    committed = dict(positions)
    finally:
        try:
            if auto_commit and positions and positions != committed:
                member.commit(positions)
        except ToolError as e:
            _warn(str(e))
        finally:
            member.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def _assigned_positions(member, reader: _Reader
                        ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Join, then (start offset of every assigned partition, the group's committed
    offsets of those that have one). A partition without one starts per auto.offset.reset
    and that position is committed like any other (so a restart does not reset again)."""
    assigned = member.join()
    if not assigned:
        return {}, {}
    reader.refresh_leaders(assigned)
    committed = member.committed(assigned)
    positions = dict(committed)
    missing = [tp for tp in assigned if tp not in positions]
    if missing:
        positions.update(reader.reset(missing))
    return {tp: positions[tp] for tp in assigned}, committed
