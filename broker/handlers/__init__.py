"""One module per API family; importing a module registers its handlers (see registry)."""

from __future__ import annotations

import importlib

# Modules listed here are imported by load_all(); each registers its API keys.
HANDLER_MODULES = [
    "api_versions",
    "metadata",
    "topics",
    "produce",
    "fetch",
    "list_offsets",
    "producer_id",
    "offset_for_leader_epoch",
    "telemetry",
    "cluster",
    "configs",
    "admin_partitions",
    "log_dirs",
    "find_coordinator",
    "groups",
    "group_admin",
    "offsets",
    "producers",
    "control_requests",
    "broker_to_controller",
    "reassignments",
    "describe_topic_partitions",
    # issue 14: transactions
    "transactions",
    "write_txn_markers",
    "txn_offset_commit",
    "transactions_admin",
    "consumer_groups",
    "features",
    "sasl",
    "scram_credentials",
    "acls",
    "client_quotas",
    "delegation_tokens",
    # issue 28: share groups (KIP-932)
    "share_groups",
    "share_fetch",
    "share_state",
    "share_offsets",
]


def load_all() -> None:
    """Import every handler module in ``HANDLER_MODULES`` (idempotent).

    Every listed module exists, so any import failure (``ModuleNotFoundError`` included)
    propagates: a broker missing a handler module fails at startup instead of silently not
    advertising those APIs in ApiVersions."""
    for name in HANDLER_MODULES:
        importlib.import_module(f"{__name__}.{name}")
