# Behaviour: Fetch (api key 1) reads record batches for consumers (replica_id -1: up to the
#   high watermark; read_committed: up to the last stable offset, with the aborted
#   transactions overlapping the read from the segments' .txnindex) and followers (replica_id >= 0: up to the log
#   end offset; their fetch offset updates the leader's follower state and may move the HW).
#   Record bytes leave as file slices of the segment files (sendfile, zero copy); a partial
#   batch at the end of a slice is allowed, as in Kafka (clients drop it). Byte limits follow
#   KIP-74: the response stops at max_bytes and each partition at its partition_max_bytes,
#   except that the first partition with data returns at least one whole batch. Fewer than
#   min_bytes (and no error) parks a DelayedFetch for up to max_wait_ms, completed early by
#   appends / HW moves, leader changes or deletion. max_bytes is capped by the broker's
#   fetch.max.bytes (replica.fetch.response.max.bytes for followers), KIP-541. Fetch
#   sessions (KIP-227) come from broker.fetch_session: an incremental fetch reads only the
#   session's partitions that changed, and parked it waits on the whole session (issue 21,
#   followers use sessions as Kafka's replica fetchers do). Per-partition errors: UNKNOWN_TOPIC_OR_PARTITION,
#   TOPIC_AUTHORIZATION_FAILED (an authorizer denied READ on the topic, or CLUSTER_ACTION on the
#   cluster to a follower), UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE, FENCED_LEADER_EPOCH,
#   UNKNOWN_LEADER_EPOCH, UNSUPPORTED_COMPRESSION_TYPE (zstd to an old fetch version). A
#   consumer over its consumer_byte_rate quota gets an empty response with throttle_time_ms
#   and its connection muted for that long (KIP-219, broker.handlers.throttling);
#   top-level: FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
#   FETCH_SESSION_TOPIC_ID_ERROR. A follower sending last_fetched_epoch (v12+) whose epoch
#   history diverges from the leader's gets diverging_epoch and no records (KIP-595); a
#   follower's fetch may be throttled (KIP-73, empty records). KIP-392: with
#   replica.selector.class set, a leader may answer a v11+ consumer (rack_id = client.rack)
#   with preferred_read_replica and no records; v11+ consumers may fetch from a follower,
#   which serves records below its own high watermark.
# Version notes: v0-v3 clients read magic 0/1 only: batches are down-converted (v0-v1 to
#   magic 0, v2-v3 to magic 1; protocol.legacy_records.convert_from_v2) and copied; v0-v2
#   have no max_bytes and a hard partition limit (no KIP-74 first-batch exception); v4+
#   isolation_level, last_stable_offset, aborted_transactions; v5+ log_start_offset; v7+
#   sessions and top-level error_code; v9+ current_leader_epoch; v11+ rack_id (KIP-392) and
#   preferred_read_replica; v12+ flexible, last_fetched_epoch; v13+ topic ids instead of
#   names; v15+ replica_id moves into the tagged replica_state; v16-v17 add tagged node
#   endpoints / replica directory id (left default); v18 a partition's tagged high_watermark
#   (KIP-1166: the fetching replica's high watermark, which Kafka's KRaft quorum uses to
#   answer at once; a partition leader ignores it, as Kafka's ReplicaManager does).

from __future__ import annotations

from broker.fetch_session import INVALID_SESSION_ID, FetchSessionCache
from broker.handlers import authz, throttling
from broker.handlers.registry import handles
from broker.metrics import TOPIC_STATS
from broker.partition import READ_COMMITTED
from broker.purgatory.delayed_fetch import FetchParams, FetchPartitionData, PartitionFetchInfo
from protocol.errors import ErrorCode, KafkaError
from protocol.legacy_records import convert_from_v2
from protocol.messages import FetchRequest, FetchResponse

API_KEY = 1
MIN_VERSION, MAX_VERSION = 0, 18
INT32_MAX = 0x7FFFFFFF
TOPIC_ID_VERSION = 13
DEFAULT_FETCH_MAX_BYTES = 57_671_680  # fetch.max.bytes (55 MiB)

_TopicResp = FetchResponse.FetchableTopicResponse
_PartResp = FetchResponse.PartitionData
_Aborted = FetchResponse.AbortedTransaction


def _session_cache(broker) -> FetchSessionCache:
    cache = getattr(broker, "fetch_session_cache", None)
    if cache is None:
        cache = broker.fetch_session_cache = FetchSessionCache()
        rm = getattr(broker, "replica_manager", None)
        if rm is not None:  # it reports partition changes to the sessions
            rm.fetch_session_cache = cache
    return cache


def _broker_max_bytes(broker, replica_id: int) -> int:
    """KIP-541: the broker caps every response at fetch.max.bytes (consumers) or
    replica.fetch.response.max.bytes (followers); this also bounds down-conversion memory."""
    key = "replica.fetch.response.max.bytes" if replica_id >= 0 else "fetch.max.bytes"
    try:
        value = broker.config.get(key)
    except (AttributeError, KeyError):
        value = None
    return int(value) if value else DEFAULT_FETCH_MAX_BYTES


def _replica_id(req: FetchRequest, version: int) -> int:
    if version >= 15:
        return req.replica_state.replica_id if req.replica_state is not None else -1
    return req.replica_id


def _records_for(version: int, data: FetchPartitionData):
    """The records value to encode: file slices as they are (v4+), or down-converted
    magic 0/1 bytes (v0-v3)."""
    records = data.records
    if not records:
        return b""
    if version >= 4:
        return records
    raw = records.read_bytes() if hasattr(records, "read_bytes") else bytes(records)
    return convert_from_v2(raw, 0 if version <= 1 else 1)


def _partition(version: int, index: int, data: FetchPartitionData, isolation: int):
    error = data.error
    records = b""
    if error == ErrorCode.NONE:
        try:
            records = _records_for(version, data)
        except KafkaError as e:
            error = e.code
    aborted = None
    if isolation == READ_COMMITTED:
        aborted = [_Aborted(producer_id=pid, first_offset=first)
                   for pid, first in data.aborted_transactions or ()]
    if error != ErrorCode.NONE:
        return _PartResp(partition_index=index, error_code=error, high_watermark=-1,
                         last_stable_offset=-1, log_start_offset=-1,
                         aborted_transactions=aborted, preferred_read_replica=-1, records=b"")
    resp = _PartResp(partition_index=index, error_code=ErrorCode.NONE,
                     high_watermark=data.high_watermark,
                     last_stable_offset=data.last_stable_offset,
                     log_start_offset=data.log_start_offset, aborted_transactions=aborted,
                     preferred_read_replica=data.preferred_read_replica, records=records)
    if data.diverging_epoch is not None:
        resp.diverging_epoch = FetchResponse.EpochEndOffset(epoch=data.diverging_epoch[0],
                                                            end_offset=data.diverging_epoch[1])
    return resp


def _group(version: int, entries, isolation: int) -> list:
    """[(topic, topic_id, partition, data)] -> topic responses, consecutive runs grouped."""
    topics: list = []
    last_key = None
    for topic, topic_id, index, data in entries:
        key = topic_id if version >= TOPIC_ID_VERSION else topic
        if key != last_key or not topics:
            if version >= TOPIC_ID_VERSION:
                topics.append(_TopicResp(topic_id=topic_id, partitions=[]))
            else:
                topics.append(_TopicResp(topic=topic, partitions=[]))
            last_key = key
        topics[-1].partitions.append(_partition(version, index, data, isolation))
    return topics


def error_response(req: FetchRequest, version: int, error: KafkaError) -> FetchResponse:
    """Every requested partition answers `error.code` (and the top-level code, v7+)."""
    topics = []
    for t in req.topics:
        parts = [_PartResp(partition_index=p.partition, error_code=error.code,
                           high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                           records=b"") for p in t.partitions]
        if version >= TOPIC_ID_VERSION:
            topics.append(_TopicResp(topic_id=t.topic_id, partitions=parts))
        else:
            topics.append(_TopicResp(topic=t.topic, partitions=parts))
    return FetchResponse(error_code=error.code, session_id=INVALID_SESSION_ID,
                         responses=topics)


@handles(API_KEY, MIN_VERSION, MAX_VERSION, error_response=error_response)
def handle_fetch(ctx, req: FetchRequest):
    version = ctx.api_version
    broker = ctx.broker
    cache = broker.metadata_cache
    replica_id = _replica_id(req, version)
    isolation = req.isolation_level if version >= 4 else 0
    max_bytes = req.max_bytes if version >= 3 else INT32_MAX
    params = FetchParams(replica_id=replica_id, max_wait_ms=req.max_wait_ms,
                         min_bytes=req.min_bytes,
                         max_bytes=min(max_bytes, _broker_max_bytes(broker, replica_id)),
                         isolation_level=isolation, hard_max_bytes_limit=version <= 2,
                         replica_epoch=req.replica_state.replica_epoch
                         if version >= 15 and req.replica_state is not None else -1,
                         rack_id=(req.rack_id or "") if version >= 11 else "",
                         # KIP-392: v11+ consumers may read from a follower (to its HW)
                         fetch_only_from_leader=replica_id >= 0 or version < 11)
    use_ids = version >= TOPIC_ID_VERSION
    fetch_data = []
    unknown_ids = []
    for t in req.topics:
        if use_ids:
            name = cache.topic_name(t.topic_id)
            if name is None:
                unknown_ids.extend((t.topic_id, p.partition) for p in t.partitions)
                continue
            tid = t.topic_id
        else:
            name = t.topic
            tid = None
        for p in t.partitions:
            info = PartitionFetchInfo(p.fetch_offset, p.partition_max_bytes,
                                      p.current_leader_epoch, p.log_start_offset,
                                      p.last_fetched_epoch)
            fetch_data.append(((name, p.partition), info, tid))
    forgotten = []
    if version >= 7:
        for f in req.forgotten_topics_data:
            name = cache.topic_name(f.topic_id) if use_ids else f.topic
            if name is not None:
                forgotten.extend((name, p) for p in f.partitions)
    context = _session_cache(broker).new_context(
        version, req.session_id if version >= 7 else 0,
        req.session_epoch if version >= 7 else -1, fetch_data, forgotten, replica_id >= 0)
    if context.error:
        return FetchResponse(error_code=context.error, session_id=INVALID_SESSION_ID,
                             responses=[])

    rm = broker.replica_manager
    incremental = context.kind == "incremental"
    to_fetch = context.partitions_to_fetch(rm.get_partition, rm.replica_change_stamp) \
        if incremental else context.partitions_to_fetch()
    denied = _unauthorized(ctx, replica_id, to_fetch)
    if denied:
        refused = {tp: FetchPartitionData(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                   for tp, _ in to_fetch if tp[0] in denied}
        to_fetch = [x for x in to_fetch if x[0][0] not in denied]

    def build(results: dict) -> FetchResponse:
        if denied:
            results = {**results, **refused}
        TOPIC_STATS.record_fetch(results, replica_id >= 0, version < 4)
        session_id, parts = context.update_and_generate_response_data(results)
        entries = [(tp[0], context.topic_id(tp) if use_ids else None, tp[1], data)
                   for tp, data in parts]
        for tid, index in unknown_ids:
            entries.append(("", tid, index, FetchPartitionData(ErrorCode.UNKNOWN_TOPIC_ID)))
        if replica_id < 0:  # consumer_byte_rate (followers have replication quotas instead)
            size = sum(len(data.records) for _, _, _, data in entries if data.records)
            throttle_ms = throttling.fetch(ctx, size + 64 * len(entries))
            if throttle_ms:  # Kafka: unrecord, answer empty, mute the connection (KIP-219)
                throttling.unrecord_fetch(ctx, size + 64 * len(entries))
                throttling.throttle(ctx, throttle_ms)
                incremental = version >= 7 and req.session_id == session_id
                return FetchResponse(error_code=ErrorCode.NONE, throttle_time_ms=throttle_ms,
                                     session_id=session_id if incremental else
                                     INVALID_SESSION_ID, responses=[])
        return FetchResponse(error_code=ErrorCode.NONE, session_id=session_id,
                             responses=_group(version, entries, isolation))

    return rm.fetch_messages(params, to_fetch, context.session if incremental else None, build)


def _unauthorized(ctx, replica_id: int, to_fetch) -> set[str]:
    """Topics this fetch may not read: consumers need READ on each topic, followers
    CLUSTER_ACTION on the cluster (else every topic is refused), as Kafka's handleFetchRequest."""
    if not authz.enabled(ctx):
        return set()
    names = {tp[0] for tp, _ in to_fetch}
    if replica_id >= 0:
        return set() if authz.authorize_cluster(ctx, authz.AclOperation.CLUSTER_ACTION) \
            else names
    return authz.unauthorized(ctx, authz.AclOperation.READ, authz.ResourceType.TOPIC, names)
