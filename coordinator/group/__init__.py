"""The group coordinator (Kafka's GroupCoordinator + GroupMetadataManager, and the KIP-848 /
KIP-932 group types of its group-coordinator module).

- ``group``: GroupMetadata / MemberMetadata and the classic group state machine.
- ``consumer_group`` / ``share_group``: the KIP-848 consumer and KIP-932 share group models.
- ``delayed_join`` / ``delayed_sync`` / ``delayed_heartbeat``: the rebalance, SyncGroup
  deadline and session-timeout operations parked in the runtime's purgatories.
- ``records`` / ``consumer_records`` / ``share_group_records``: Kafka's ``__consumer_offsets``
  key/value records.
- ``group_store``: partition mapping, appends to and loading from ``__consumer_offsets``.
- ``group_membership``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and rebalances.
- ``partition_loading``: ``__consumer_offsets`` partition ownership, loading and load retries.
- ``group_coordinator``: offsets, admin and expiry (+ the loading and membership parts).
- ``consumer_coordinator`` / ``share_groups``: ConsumerGroupHeartbeat / ShareGroupHeartbeat
  (what both share: ``heartbeat_common``); ``consumer_config``: the ``group.consumer.*``
  settings; ``consumer_migration``: classic members in consumer groups and the online
  up-/downgrades.
- ``txn_offsets``: transactional offset commits (TxnOffsetCommit, markers, replay).
The broker wires it: ``broker.coordinator_wiring``.
"""
