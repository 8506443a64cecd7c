"""``josef get-offsets``: print partition offsets, like ``kafka-get-offsets.sh``.

Output one line per partition: ``topic:partition:offset`` (offset empty when no record
matches the timestamp). ``--time``: ``-1``/``latest`` (the log end offset / high watermark),
``-2``/``earliest`` (the log start offset), or a timestamp in ms (the first offset whose
timestamp is >= it). ``--topic`` is a regular expression; ``--partitions 0,2`` narrows.
APIs: Metadata, ListOffsets (v1+).
"""

from __future__ import annotations

import argparse

from cli._common import (
    INTERNAL_TOPICS,
    UsageError,
    add_bootstrap,
    connect,
    tool_main,
    topic_matcher,
)
from client.offsets import EARLIEST, LATEST, list_offsets

COMMAND = "get-offsets"
HELP = "Print partition offsets for a time (like kafka-get-offsets.sh)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--topic", metavar="REGEX", help="topic(s); default all")
    p.add_argument("--partitions", metavar="P,...", help="comma-separated partition ids")
    p.add_argument("--time", default="-1", metavar="TIME",
                   help="-1/latest (default), -2/earliest, or a timestamp in ms")
    p.add_argument("--exclude-internal-topics", action="store_true",
                   help="leave internal topics out")


def parse_time(text: str) -> int:
    named = {"latest": LATEST, "earliest": EARLIEST}
    if text.lower() in named:
        return named[text.lower()]
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--time must be -1, -2, latest, earliest or a timestamp in ms, "
                         f"not {text!r}") from None


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    ts = parse_time(args.time)
    wanted = None
    if args.partitions:
        try:
            wanted = {int(x) for x in args.partitions.split(",") if x.strip()}
        except ValueError:
            raise UsageError("--partitions must be comma-separated integers") from None
    match = topic_matcher(args.topic)
    with connect(args) as client:
        md = client.metadata(None)
        leaders = {}
        for t in md.topics:
            if t.error_code or not match(t.name):
                continue
            if args.exclude_internal_topics and t.name in INTERNAL_TOPICS:
                continue
            for p in t.partitions:
                if wanted is None or p.partition_index in wanted:
                    leaders[(t.name, p.partition_index)] = p.leader_id
        offsets = list_offsets(client, sorted(leaders), ts, leaders)
    for (t, p), off in sorted(offsets.items()):
        print(f"{t}:{p}:{off if off >= 0 else ''}")
    return 0
