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

from cli._common import UsageError, add_bootstrap, connect, partition_leaders, tool_main
from cli._progress import ProgressBar
from client.connection import ToolError
from client.producer import Sender, key_partition

COMMAND = "console-producer"
HELP = "Produce lines from stdin or a file (like kafka-console-producer.sh)"
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
