"""DescribeLogDirs (35) and AlterReplicaLogDirs (34): where partitions live among log.dirs,
and moving them (KIP-113).

Behaviour (Kafka's ``ReplicaManager.describeLogDirs``, KIP-113, KIP-827 for v4 sizes):
- One result per configured log dir (absolute path). ``topics`` null means every partition
  this broker hosts; otherwise only the requested partitions that exist here (unknown ones
  are left out, no error).
- ``partition_size``: bytes of all segment files of the partition (``Log.size_in_bytes``).
  ``offset_lag``: 0 and ``is_future_key`` false for the current replica; a partition being
  moved (AlterReplicaLogDirs) also appears under the destination dir with
  ``is_future_key`` true and ``offset_lag`` = current log end offset - the future's.
- AlterReplicaLogDirs: per partition NONE (the move started, runs in the background -
  ``broker.alter_log_dirs``; or it is already there), LOG_DIR_NOT_FOUND (57, the path is not
  one of log.dirs), REPLICA_NOT_AVAILABLE (9, the partition is not hosted here).
- v4 ``total_bytes`` / ``usable_bytes``: the file system's size and the bytes available to
  the broker (``statvfs``: f_blocks and f_bavail times f_frsize); a dir that cannot be
  stat'ed answers KAFKA_STORAGE_ERROR (56) with -1 sizes.
- An offline dir (failed, KIP-112) answers KAFKA_STORAGE_ERROR with no partitions, as
  Kafka's offline dirs do (its sizes as statvfs still sees them); AlterReplicaLogDirs to it
  answers KAFKA_STORAGE_ERROR.
- v3+ top-level ``error_code`` is NONE.

Authorization: DescribeLogDirs needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED
(top level, no results); AlterReplicaLogDirs needs ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED for every requested partition and nothing moves.

Version notes: DescribeLogDirs v0-v4 (v2+ flexible; v3 top-level error code; v4
total/usable bytes); AlterReplicaLogDirs v0-v2 (v2 flexible).
"""

from __future__ import annotations

import os

from broker.handlers import authz
from broker.handlers.registry import error_code_response, handles
from protocol import api
from protocol.errors import ErrorCode

DESCRIBE_LOG_DIRS = 35
DescribeLogDirsResponse = api.API_KEYS[DESCRIBE_LOG_DIRS].response_cls
error_response = error_code_response(DescribeLogDirsResponse)


def _wanted(request) -> set[tuple[str, int]] | None:
    if request.topics is None:
        return None
    return {(t.topic, p) for t in request.topics for p in t.partitions}


def _disk_usage(path: str) -> tuple[int, int]:
    """(total bytes, usable bytes) of the file system holding ``path``."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@handles(DESCRIBE_LOG_DIRS, 0, 4, error_response=error_response)
def handle_describe_log_dirs(ctx, request):
    if not authz.authorize_cluster(ctx, authz.AclOperation.DESCRIBE):
        return DescribeLogDirsResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                       results=[])
    lm = ctx.broker.log_manager
    mover = getattr(ctx.broker, "log_dir_mover", None)
    wanted = _wanted(request)
    per_dir: dict[str, dict[str, list]] = {d: {} for d in lm.log_dirs}
    for tp, log in sorted(lm.all_logs().items()):
        if wanted is not None and tp not in wanted:
            continue
        d = lm.log_dir_of(tp)
        if d not in per_dir:
            continue
        per_dir[d].setdefault(tp[0], []).append(
            DescribeLogDirsResponse.DescribeLogDirsPartition(
                partition_index=tp[1], partition_size=log.size_in_bytes, offset_lag=0,
                is_future_key=False))
        moving = mover.future(tp) if mover is not None else None
        if moving is not None and moving[0] in per_dir:
            fdir, future = moving
            per_dir[fdir].setdefault(tp[0], []).append(
                DescribeLogDirsResponse.DescribeLogDirsPartition(
                    partition_index=tp[1], partition_size=future.size_in_bytes,
                    offset_lag=max(log.log_end_offset - future.log_end_offset, 0),
                    is_future_key=True))
    results = []
    for d, topics in per_dir.items():
        res = DescribeLogDirsResponse.DescribeLogDirsResult(
            log_dir=d, topics=[DescribeLogDirsResponse.DescribeLogDirsTopic(
                name=name, partitions=parts) for name, parts in topics.items()])
        try:
            res.total_bytes, res.usable_bytes = _disk_usage(d)
        except OSError:
            res.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
            res.total_bytes = res.usable_bytes = -1
            res.topics = []
        if lm.failure_channel.is_offline(d):
            res.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
            res.topics = []
        results.append(res)
    return DescribeLogDirsResponse(results=results)


ALTER_REPLICA_LOG_DIRS = 34
AlterReplicaLogDirsResponse = api.API_KEYS[ALTER_REPLICA_LOG_DIRS].response_cls


def alter_error_response(request, version: int, error):
    R = AlterReplicaLogDirsResponse
    by_topic: dict[str, list] = {}
    for d in request.dirs:
        for t in d.topics:
            by_topic.setdefault(t.name, []).extend(
                R.AlterReplicaLogDirPartitionResult(partition_index=p,
                                                    error_code=int(error.code))
                for p in t.partitions)
    return R(results=[R.AlterReplicaLogDirTopicResult(topic_name=n, partitions=ps)
                      for n, ps in by_topic.items()])


@handles(ALTER_REPLICA_LOG_DIRS, 0, 2, error_response=alter_error_response)
def handle_alter_replica_log_dirs(ctx, request):
    # ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED in every partition (KafkaApis).
    authz.require_cluster(ctx, authz.AclOperation.ALTER)
    mover = getattr(ctx.broker, "log_dir_mover", None)
    R = AlterReplicaLogDirsResponse
    results: dict[str, list] = {}
    for d in request.dirs:
        tps = [(t.name, p) for t in d.topics for p in t.partitions]
        errors = mover.alter(d.path, tps) if mover is not None else \
            dict.fromkeys(tps, ErrorCode.KAFKA_STORAGE_ERROR)
        for (topic, p), err in errors.items():
            results.setdefault(topic, []).append(
                R.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=int(err)))
    return R(results=[R.AlterReplicaLogDirTopicResult(topic_name=n, partitions=ps)
                      for n, ps in results.items()])
