"""Coordinators as their own subsystems (Kafka's group-/transaction-/share-coordinator modules).

They see the broker through a small runtime interface (append to and read an internal
partition, leadership callbacks, the purgatory and its timer), never its internals.
Today this package holds `coordinator.share` (KIP-932 share groups); the group and
transaction coordinators move here from `coordinator/group/` later.
"""
