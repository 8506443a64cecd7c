"""Share groups (KIP-932), with Josef's delayed redelivery and dead-letter topics.

Share-partition side (the broker that leads the topic-partition):
- `share_partition`  `SharePartition`: the per (group, topic-partition) state machine
- `acquisition`      acquiring fetched records (lock window, read_committed filtering)
- `acknowledgement`  planning ACCEPT/RELEASE/REJECT/GAP and releases; error rules
- `in_flight`        the in-flight cache (batches, per-offset states, range timeouts)
- `transactions`     which fetched offsets are never delivered (markers, aborted data)
- `load`             becoming leader: state rebuilt from the persisted snapshot
- `dead_letter`      dead-letter records and the exactly-once design
- `timer`            the narrow timer interface, over the purgatory's timing wheel
- `config`           per-partition settings (Kafka's share configs + Josef's keys)

Share coordinator side (the broker that leads a `__share_group_state` partition):
- `coordinator_shard`  `ShareCoordinatorShard`: replayed model + *ShareGroupState operations
- `records`            ShareSnapshot/ShareUpdate dataclasses and their bytes (codec seam)
- `state_batches`      merging persisted state runs

Between them: `persister` (the `Persister` seam and request/result types) and
`local_persister` (an in-process persister on a shard). Group side: `assignor`.
"""
