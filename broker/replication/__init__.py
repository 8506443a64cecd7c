"""Replication (issue 12): follower fetchers, ISR changes sent to the controller, throttles.

- `replica_state`: what a leader knows of each follower (Kafka's Replica / ReplicaState) and
  the committed / pending ISR states (KIP-497 "maximal ISR").
- `alter_partition_manager`: AlterPartitionManager, batches ISR changes into AlterPartition
  requests to the controller.
- `fetcher`, `fetcher_manager`: ReplicaFetcher (one asyncio task and one connection per
  leader broker and fetcher id) and ReplicaFetcherManager.
- `quota`: replication throttles (KIP-73). `replica_selector`: KIP-392 read replica choice.
"""
