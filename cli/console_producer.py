"""``josef console-producer``: one record per input line, like ``kafka-console-producer.sh``.

Input: stdin, or ``--input-file`` (with a progress bar on stderr when it is a terminal or
``--progress`` is given). ``--property`` options follow Kafka's LineMessageReader:

- ``parse.key=true``: ``key<key.separator>value`` (separator default TAB); a line without
  the separator is an error (``ignore.error=true`` takes the whole line as the value).
- ``parse.headers=true``: ``h1:v1,h2:v2<headers.delimiter>...`` before the key/value
  (``headers.delimiter`` TAB, ``headers.separator`` ",", ``headers.key.separator`` ":"); a
  header without the key separator has a null value; ``NO_HEADERS`` means none.
- ``null.marker=X``: a key or value equal to X is sent as null.

Partitioning as Kafka's default partitioner: keyed records go to
``murmur2(key) & 0x7fffffff % partitions``; unkeyed records stick to one partition per
batch, rotating between batches (KIP-480 sticky partitioning). ``--compression-codec``
none/gzip/snappy/lz4/zstd (given alone: gzip). ``--request-required-acks`` -1 (default), 0
or 1. A batch is sent when it reaches ``--batch-size`` bytes (16384), at end of input, and
after every line when stdin is a terminal. APIs: Metadata, Produce (v3+, RecordBatch v2).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from cli._common import UsageError, add_bootstrap, connect, partition_leaders, tool_main
from cli._progress import ProgressBar
from client.admin import AdminRouter
from client.connection import ToolError, error_name

COMMAND = "console-producer"
HELP = "Produce lines from stdin or a file (like kafka-console-producer.sh)"
PRODUCE = 0
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="parse.key, key.separator, parse.headers, headers.delimiter, "
                        "headers.separator, headers.key.separator, null.marker, ignore.error")
    p.add_argument("--compression-codec", nargs="?", const="gzip", default="none",
                   choices=sorted(CODECS), help="none (default), gzip, snappy, lz4 or zstd")
    p.add_argument("--request-required-acks", default="-1", choices=["-1", "0", "1", "all"],
                   help="acks (default -1 = all)")
    p.add_argument("--batch-size", type=int, default=16384, metavar="BYTES",
                   help="send a batch once it holds this many bytes (default 16384)")
    p.add_argument("--partition", type=int, metavar="N", help="send every record here")
    p.add_argument("--input-file", metavar="FILE", help="read lines from FILE, not stdin")
    p.add_argument("--progress", action="store_true",
                   help="show a progress bar even when stderr is not a terminal")


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 (seed 0x9747b28c) as used by its default partitioner; the
    result is a signed 32-bit int, like Java's."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length & 3
    idx = 4 * n4
    if tail == 3:
        h ^= data[idx + 2] << 16
    if tail >= 2:
        h ^= data[idx + 1] << 8
    if tail >= 1:
        h ^= data[idx]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class LineReader:
    """Parses one input line into (headers, key, value) per the ``--property`` settings."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = props.get("parse.key", "false").lower() == "true"
        self.key_sep = props.get("key.separator", "\t")
        self.parse_headers = props.get("parse.headers", "false").lower() == "true"
        self.headers_delim = props.get("headers.delimiter", "\t")
        self.headers_sep = props.get("headers.separator", ",")
        self.header_key_sep = props.get("headers.key.separator", ":")
        self.null_marker = props.get("null.marker")
        self.ignore_error = props.get("ignore.error", "false").lower() == "true"

    def _nullable(self, text: str) -> bytes | None:
        if self.null_marker is not None and text == self.null_marker:
            return None
        return text.encode("utf-8")

    def parse(self, line: str, lineno: int) -> tuple[list, bytes | None, bytes | None]:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, rest = line.partition(self.headers_delim)
            if not sep:
                if not self.ignore_error:
                    raise ToolError(f"line {lineno}: no headers delimiter "
                                    f"{self.headers_delim!r}")
                head, rest = "", line
            if head and head != "NO_HEADERS":
                for h in head.split(self.headers_sep):
                    k, ksep, v = h.partition(self.header_key_sep)
                    headers.append((k, self._nullable(v) if ksep else None))
        key = None
        if self.parse_key:
            k, sep, value = rest.partition(self.key_sep)
            if not sep:
                if not self.ignore_error:
                    raise ToolError(f"line {lineno}: no key separator {self.key_sep!r}")
                return headers, None, self._nullable(rest)
            return headers, self._nullable(k), self._nullable(value)
        return headers, key, self._nullable(rest)


class Sender:
    """Accumulates records per partition and sends Produce requests to the leaders."""

    def __init__(self, client, topic: str, leaders: dict[int, int], codec: int, acks: int,
                 batch_size: int) -> None:
        from protocol.records import RecordBatchBuilder

        self._builder_cls = RecordBatchBuilder
        self.client = client
        self.topic = topic
        self.leaders = leaders
        self.codec = codec
        self.acks = acks
        self.batch_size = batch_size
        self.version = client.version_for(PRODUCE, max_version=9)
        if self.version < 3:
            raise ToolError("the broker does not support RecordBatch v2 (Produce v3+)")
        self.pending: dict[int, tuple] = {}  # partition -> (builder, approx bytes)
        self.sent = 0

    def add(self, partition: int, headers, key, value) -> None:
        builder, size = self.pending.get(partition, (None, 0))
        if builder is None:
            builder = self._builder_cls(compression_type=self.codec)
        builder.append(int(time.time() * 1000), key, value, headers)
        size += len(key or b"") + len(value or b"") + 16 + sum(
            len(k) + len(v or b"") for k, v in headers)
        self.pending[partition] = (builder, size)
        if size >= self.batch_size:
            self.flush([partition])

    def flush(self, partitions=None) -> None:
        parts = list(self.pending) if partitions is None else partitions
        batches = {p: self.pending.pop(p)[0].build() for p in parts}
        if self.acks == 0:  # no answer to wait for: nothing to resend
            by_leader: dict[int, list] = {}
            for p, records in batches.items():
                by_leader.setdefault(self.leaders[p], []).append((p, records))
            for leader, items in by_leader.items():
                self.client.send_no_response(PRODUCE, self._body(items), version=self.version,
                                             node=leader)
            self.sent += sum(len(b) for b in batches.values())
            return

        def build(tps):
            return self._body([(p, batches[p]) for _, p in tps])

        def results(resp):
            for t in resp.responses:
                for pr in t.partition_responses:
                    yield (t.name, pr.index), pr.error_code, pr

        leaders = {(self.topic, p): n for p, n in self.leaders.items()}
        got = AdminRouter(self.client).to_leaders(  # resent to a new leader after a move
            PRODUCE, [(self.topic, p) for p in batches], build, results, self.version, leaders)
        self.leaders.update({p: n for (_, p), n in leaders.items()})
        for (t, p), (code, pr) in sorted(got.items()):
            if code:
                msg = getattr(pr, "error_message", None)
                raise ToolError(f"producing to {t}-{p} failed: {error_name(code)}"
                                + (f" ({msg})" if msg else ""))
        self.sent += sum(len(b) for b in batches.values())

    def _body(self, items) -> dict:
        return {"transactional_id": None, "acks": self.acks, "timeout_ms": 30000,
                "topic_data": [{"name": self.topic, "partition_data": [
                    {"index": p, "records": records} for p, records in items]}]}


def _props(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise UsageError(f"--property needs key=value, got {item!r}")
        out[k.strip()] = v
    return out


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    reader = LineReader(_props(args.property))
    acks = -1 if args.request_required_acks == "all" else int(args.request_required_acks)
    if args.input_file:
        try:
            stream = open(args.input_file, encoding="utf-8", newline="")
        except OSError as e:
            raise ToolError(f"cannot read {args.input_file}: {e.strerror}") from None
        total = os.path.getsize(args.input_file)
        interactive = False
    else:
        stream, total = sys.stdin, None
        interactive = sys.stdin.isatty()
    with connect(args) as client, stream:
        leaders_tp = partition_leaders(client, [args.topic], auto_create=True)
        leaders = {p: leader for (_, p), leader in leaders_tp.items()}
        if not leaders:
            raise ToolError(f"topic {args.topic} has no partitions")
        if args.partition is not None and args.partition not in leaders:
            raise UsageError(f"topic {args.topic} has no partition {args.partition}")
        n = len(leaders)
        sender = Sender(client, args.topic, leaders, CODECS[args.compression_codec], acks,
                        args.batch_size)
        sticky = 0
        with ProgressBar(total, f"{args.topic}", force=args.progress or None) as bar:
            for lineno, raw in enumerate(stream, 1):
                bar.update(len(raw.encode("utf-8")) if total else 0)
                line = raw.rstrip("\n").rstrip("\r")
                headers, key, value = reader.parse(line, lineno)
                if args.partition is not None:
                    part = args.partition
                elif key is not None:
                    part = key_partition(key, n)
                else:
                    part = sticky
                sender.add(part, headers, key, value)
                if args.partition is None and key is None and part not in sender.pending:
                    sticky = (sticky + 1) % n  # the batch went out: stick to the next one
                if interactive:
                    sender.flush()
            sender.flush()
    return 0
