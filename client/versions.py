"""The newest version of each API that Josef's own client code builds requests for.

The codec speaks every version up to Kafka 4.2's specs, but a request body built by the
tools, the console, the connectors and the broker's own links (replica fetcher, transaction
markers) uses the fields of the versions it was written for. Newer versions of these APIs
change what a request means (topic ids instead of names in Produce v13 and OffsetCommit /
OffsetFetch v10, the implicit AddPartitionsToTxn of Produce v12, ...), so unless a caller
asks for more (`version_for(..., max_version=N)`) a connection never negotiates above this
table: the APIs' maximum in Kafka 4.0's specs (`messages/`).
"""

from __future__ import annotations

# api key -> newest version sent unless the caller passes max_version
DEFAULT_MAX_VERSION: dict[int, int] = {
    0: 11,   # Produce: v12 adds partitions to a v2 transaction implicitly, v13 topic ids
    1: 17,   # Fetch: v18 the follower's high watermark (KIP-1166)
    2: 10,   # ListOffsets: v11 the earliest pending upload timestamp (KIP-1023)
    3: 12,   # Metadata: v13 a top-level error code
    8: 9,    # OffsetCommit: v10 topic ids
    9: 9,    # OffsetFetch: v10 topic ids
    15: 5,   # DescribeGroups: v6 GROUP_ID_NOT_FOUND for an unknown group
    22: 5,   # InitProducerId: v6 two-phase commit (KIP-939)
    28: 4,   # TxnOffsetCommit: v5 adds the offsets partition to a v2 transaction implicitly
    45: 0,   # AlterPartitionReassignments: v1 AllowReplicationFactorChange
    60: 1,   # DescribeCluster: v2 IncludeFencedBrokers
    66: 1,   # ListTransactions: v2 TransactionalIdPattern
    69: 0,   # ConsumerGroupDescribe: v1 MemberType
    74: 0,   # ListConfigResources: v1 ResourceTypes
}


def default_max_version(api_key: int, spec_max: int) -> int:
    """The version cap for `api_key` when the caller names none."""
    return min(spec_max, DEFAULT_MAX_VERSION.get(api_key, spec_max))
