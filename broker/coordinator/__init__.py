"""The classic group coordinator (Kafka's GroupCoordinator + GroupMetadataManager).

- ``group``: GroupMetadata / MemberMetadata and the group state machine.
- ``delayed_join`` / ``delayed_heartbeat``: the rebalance and session-timeout operations
  parked in the purgatory.
- ``records``: Kafka's ``__consumer_offsets`` key/value records for groups and offsets.
- ``group_store``: partition mapping, appends to and loading from ``__consumer_offsets``.
- ``group_membership``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and rebalances.
- ``group_coordinator``: ownership/loading, offsets, admin and expiry (+ the membership mixin).
- ``wiring``: hooks the coordinator into the broker (elections, shutdown).
"""
