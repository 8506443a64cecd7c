"""The one Kafka protocol client that every program talking to a cluster shares: the
``josef`` tools (:mod:`cli`), the console, the Spark connector where it does not use
confluent-kafka, and the test harnesses.

- :mod:`client.connection`: ``KafkaClient`` (blocking sockets; ApiVersions negotiation, one
  connection per node, ``send(request, node=None)``), ``ToolError``, ``error_name``.
- :mod:`client.metadata`: ``partition_leaders``, ``check_error``.
- :mod:`client.offsets`: ListOffsets / OffsetCommit helpers.
- :mod:`client.group_member`: a classic consumer-group member (JoinGroup/SyncGroup/Heartbeat).
- :mod:`client.groups`: find_coordinator, committed_offsets, describe_group, list_groups,
  parse_assignment.
- :mod:`client.records`: fetched_records (records of a Fetch response partition).

It depends only on :mod:`protocol` and the standard library, never on ``broker/``.
"""
