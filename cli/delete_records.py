"""``josef delete-records``: advance partitions' log start offsets, like
``kafka-delete-records.sh --offset-json-file``.

The JSON file: ``{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}``
(offset ``-1`` = up to the high watermark). Output, as Kafka's tool::

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 10
    partition: t-1	error: OFFSET_OUT_OF_RANGE

Exit code 1 if any partition failed. APIs: Metadata, DeleteRecords (to each leader).
"""

from __future__ import annotations

import argparse
import json

from cli._common import UsageError, add_bootstrap, connect, tool_main
from client.admin import AdminRouter
from client.connection import ToolError, error_name

COMMAND = "delete-records"
HELP = "Delete records below given offsets (like kafka-delete-records.sh)"
DELETE_RECORDS = 21


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='{"partitions":[{"topic":"t","partition":0,"offset":10}],"version":1}')


def read_offsets(path: str) -> list[tuple[str, int, int]]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path} is not valid JSON: {e}") from None
    try:
        out = [(str(p["topic"]), int(p["partition"]), int(p["offset"]))
               for p in doc["partitions"]]
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{path}: expected {{\"partitions\": [{{\"topic\": ..., "
                         "\"partition\": ..., \"offset\": ...}], \"version\": 1}") from None
    seen = set()
    for t, p, _ in out:
        if (t, p) in seen:
            raise UsageError(f"offset json file contains duplicate topic partitions: {t}-{p}")
        seen.add((t, p))
    return out


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    wanted = read_offsets(args.offset_json_file)
    print("Executing records delete operation")
    results: dict[tuple[str, int], str] = {}
    offsets = {(t, p): off for t, p, off in wanted}

    def build(parts):
        topics: dict[str, list] = {}
        for t, p in parts:
            topics.setdefault(t, []).append({"partition_index": p, "offset": offsets[(t, p)]})
        return {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout_ms": 30000}

    def outcomes(resp):
        for t in resp.topics:
            for p in t.partitions:
                yield (t.name, p.partition_index), p.error_code, p.low_watermark

    with connect(args) as client:  # each partition to its leader, resent after a move
        for tp, (code, low) in AdminRouter(client).to_leaders(
                DELETE_RECORDS, list(offsets), build, outcomes).items():
            results[tp] = f"error: {error_name(code)}" if code else f"low_watermark: {low}"
    print("Records delete operation completed:")
    for (t, p), text in sorted(results.items()):
        print(f"partition: {t}-{p}\t{text}")
    return 1 if any(v.startswith("error") for v in results.values()) else 0
