"""The classic group coordinator (Kafka's GroupCoordinator + GroupMetadataManager).

- ``group``: GroupMetadata / MemberMetadata and the group state machine.
- ``delayed_join`` / ``delayed_sync`` / ``delayed_heartbeat``: the rebalance, SyncGroup
  deadline and session-timeout operations parked in the purgatory.
- ``records``: Kafka's ``__consumer_offsets`` key/value records for groups and offsets.
- ``group_store``: partition mapping, appends to and loading from ``__consumer_offsets``.
- ``group_membership``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and rebalances.
- ``partition_loading``: ``__consumer_offsets`` partition ownership, loading and load retries.
- ``group_coordinator``: offsets, admin and expiry (+ the loading and membership mixins).
- ``wiring``: hooks the coordinator into the broker (elections, shutdown).
"""
