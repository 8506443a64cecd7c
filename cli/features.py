"""``josef features``: describe and update finalized features (like ``kafka-features.sh``).

``describe`` prints one line per feature the broker supports:
``Feature: <name>\\tSupportedMinVersion: <n>\\tSupportedMaxVersion: <n>\\t
FinalizedVersionLevel: <n or ->\\tEpoch: <epoch or ->`` (from ApiVersions v3+, KIP-584).
``upgrade --feature name=level`` / ``downgrade --feature name=level [--unsafe]`` /
``disable --feature name`` send UpdateFeatures (``--dry-run`` validates only).
"""

from __future__ import annotations

import argparse

from cli._common import UsageError, add_bootstrap, connect, tool_main
from client.admin import AdminRouter
from client.connection import error_name

COMMAND = "features"
HELP = "Describe and update finalized feature versions (like kafka-features.sh)"
API_VERSIONS, UPDATE_FEATURES = 18, 57


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("action", choices=["describe", "upgrade", "downgrade", "disable"])
    p.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL",
                   help="feature and level (repeatable); disable takes a name")
    p.add_argument("--unsafe", action="store_true", help="unsafe downgrade")
    p.add_argument("--dry-run", action="store_true", help="validate only")


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.action == "describe":
            r = client.request(API_VERSIONS, {"client_software_name": "josef",
                                              "client_software_version": "1"},
                               version=min(3, client.version_for(API_VERSIONS)))
            finalized = {f.name: f.max_version_level for f in r.finalized_features or ()}
            epoch = r.finalized_features_epoch if r.finalized_features_epoch >= 0 else "-"
            for f in sorted(r.supported_features or (), key=lambda f: f.name):
                level = finalized.get(f.name, "-")
                print(f"Feature: {f.name}\tSupportedMinVersion: {f.min_version}\t"
                      f"SupportedMaxVersion: {f.max_version}\tFinalizedVersionLevel: "
                      f"{level}\tEpoch: {epoch}")
            return 0
        updates = []
        for item in args.feature:
            name, _, level = item.partition("=")
            if args.action == "disable":
                level = "0"
            try:
                lvl = int(level)
            except ValueError:
                raise UsageError(f"--feature wants NAME=LEVEL, got {item!r}") from None
            kind = {"upgrade": 1, "downgrade": 3 if args.unsafe else 2, "disable": 3
                    if args.unsafe else 2}[args.action]
            updates.append({"feature": name, "max_version_level": lvl, "upgrade_type": kind,
                            "allow_downgrade": kind != 1})
        if not updates:
            raise UsageError("--feature is required")
        r = AdminRouter(client).controller(  # Kafka's AdminClient: the controller
            UPDATE_FEATURES, {"timeout_ms": 30000, "feature_updates": updates,
                              "validate_only": args.dry_run},
            errors=lambda r: [r.error_code] + [x.error_code for x in r.results])
        failed = 0
        if r.error_code:
            print(f"UpdateFeatures failed: {error_name(r.error_code)} {r.error_message or ''}")
            return 1
        errors = {x.feature: x for x in r.results or ()}
        for u in updates:
            x = errors.get(u["feature"])
            if x is not None and x.error_code:
                failed += 1
                print(f"Could not {args.action} {u['feature']}: {x.error_message}")
            else:
                verb = "validated" if args.dry_run else "was"
                print(f"{u['feature']} {verb} {args.action}d to {u['max_version_level']}.")
        return 1 if failed else 0
