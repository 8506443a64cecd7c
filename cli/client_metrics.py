"""``josef client-metrics``: KIP-714 client metrics subscriptions (like
``kafka-client-metrics.sh``).

``--list`` prints the subscription names; ``--describe [--name N]`` prints
``Client metrics configs for N are:`` and its ``key=value`` lines; ``--alter --name N
[--metrics p1,p2] [--interval MS] [--match sel=regex,...]`` sets configs (IncrementalAlter-
Configs on resource type CLIENT_METRICS 16); ``--delete --name N`` removes every config.
APIs: ListConfigResources (v0, the former ListClientMetricsResources), DescribeConfigs,
IncrementalAlterConfigs.
"""

from __future__ import annotations

import argparse

from cli._common import UsageError, add_bootstrap, connect, tool_main
from client.connection import error_name

COMMAND = "client-metrics"
HELP = "List, describe and alter client metrics subscriptions (like kafka-client-metrics.sh)"
DESCRIBE, INCREMENTAL, LIST = 32, 44, 74
RESOURCE = 16


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    g = p.add_mutually_exclusive_group(required=True)
    for flag in ("--list", "--describe", "--alter", "--delete"):
        g.add_argument(flag, action="store_true")
    p.add_argument("--name", help="subscription name")
    p.add_argument("--metrics", help="comma-separated metric name prefixes (* = all)")
    p.add_argument("--interval", type=int, help="push interval in ms")
    p.add_argument("--match", help="comma-separated selector=regex pairs")


def _names(client) -> list[str]:
    r = client.request(LIST, {})
    if r.error_code:
        raise UsageError(f"ListConfigResources failed: {error_name(r.error_code)}")
    return sorted(x.resource_name for x in r.config_resources)


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.list:
            for n in _names(client):
                print(n)
            return 0
        if args.describe:
            for n in [args.name] if args.name else _names(client):
                r = client.request(DESCRIBE, {"resources": [
                    {"resource_type": RESOURCE, "resource_name": n,
                     "configuration_keys": None}]})
                res = r.results[0]
                if res.error_code:
                    print(f"Error describing {n}: {error_name(res.error_code)}")
                    return 1
                print(f"Client metrics configs for {n} are:")
                for c in sorted(res.configs, key=lambda c: c.name):
                    print(f"  {c.name}={c.value}")
            return 0
        if not args.name:
            raise UsageError("--name is required")
        if args.delete:
            ops = [{"name": k, "config_operation": 1, "value": None}
                   for k in ("metrics", "interval.ms", "match")]
        else:
            ops = []
            if args.metrics is not None:
                ops.append({"name": "metrics", "config_operation": 0, "value": args.metrics})
            if args.interval is not None:
                ops.append({"name": "interval.ms", "config_operation": 0,
                            "value": str(args.interval)})
            if args.match is not None:
                ops.append({"name": "match", "config_operation": 0, "value": args.match})
            if not ops:
                raise UsageError("--alter needs --metrics, --interval or --match")
        r = client.request(INCREMENTAL, {"resources": [{
            "resource_type": RESOURCE, "resource_name": args.name, "configs": ops}],
            "validate_only": False})
        res = r.responses[0]
        if res.error_code:
            print(f"Error: {error_name(res.error_code)} {res.error_message or ''}")
            return 1
        print(f"Completed updating config for client-metric {args.name}.")
        return 0
