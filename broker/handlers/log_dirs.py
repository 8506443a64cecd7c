"""DescribeLogDirs (api key 35): which log directory holds which partitions, and how big.

Behaviour (Kafka's ``ReplicaManager.describeLogDirs``, KIP-113, KIP-827 for v4 sizes):
- One result per configured log dir (absolute path). ``topics`` null means every partition
  this broker hosts; otherwise only the requested partitions that exist here (unknown ones
  are left out, no error).
- ``partition_size``: bytes of all segment files of the partition (``Log.size_in_bytes``).
  ``offset_lag``: 0 (no future replicas: a partition's log never moves between dirs), and
  ``is_future_key`` false.
- v4 ``total_bytes`` / ``usable_bytes``: the file system's size and the bytes available to
  the broker (``statvfs``: f_blocks and f_bavail times f_frsize); a dir that cannot be
  stat'ed answers KAFKA_STORAGE_ERROR (56) with -1 sizes.
- v3+ top-level ``error_code`` is NONE.

Authorization: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (top level, no
results).

Version notes: v0-v4 (v2+ flexible); v3 top-level error code; v4 total/usable bytes.
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
        results.append(res)
    return DescribeLogDirsResponse(results=results)
