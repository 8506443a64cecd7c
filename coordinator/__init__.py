"""Coordinators as their own subsystems (Kafka's group-/transaction-/share-coordinator modules).

- `group`: classic, KIP-848 consumer and KIP-932 share-group membership, assignors, and the
  offsets store in `__consumer_offsets`.
- `transaction`: the transaction coordinator over `__transaction_state`.
- `share`: share-partition state and the share coordinator over `__share_group_state`.
- `runtime`: what they see of the broker (append to and read an internal partition,
  leadership callbacks, the timer and its purgatories, partition leaders, inter-broker
  requests), implemented by `broker.coordinator_runtime`; `keys`, `append_errors`: shared
  helpers. Nothing here imports `broker`; the broker wires the coordinators
  (`broker.coordinator_wiring`, `broker.share.wiring`).
"""
