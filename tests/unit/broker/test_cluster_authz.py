"""UpdateFeatures (57) and AlterReplicaLogDirs (34) need ALTER on the cluster,
ListClientMetricsResources (74) DESCRIBE_CONFIGS on the cluster (KafkaApis), checked by the
real AclAuthorizer: a principal without the ACL gets CLUSTER_AUTHORIZATION_FAILED (top level,
or in every requested partition for AlterReplicaLogDirs) and nothing is done; with the ACL
the request reaches the broker's component."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

from broker.handlers import configs, features, log_dirs
from broker.handlers.registry import REGISTRY
from broker.security.authorizer import AclAuthorizer
from broker.security.principal import KafkaPrincipal
from common.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from controller.znode_store import MemoryZNodeStore
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import (
    AlterReplicaLogDirsRequest,
    ListConfigResourcesRequest,
    UpdateFeaturesRequest,
)

DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class Controller:
    def __init__(self):
        self.updates = []

    def finalized_features(self):
        return 0, {}

    async def update_features(self, levels):
        self.updates.append(levels)
        return 1


class Mover:
    def __init__(self):
        self.moves = []

    def alter(self, path, tps):
        self.moves.append((path, tps))
        return dict.fromkeys(tps, ErrorCode.NONE)


class Metrics:
    def subscriptions(self):
        return {"cpu": None}


async def make_broker():
    authorizer = AclAuthorizer(super_users="User:admin")
    await authorizer.start(MemoryZNodeStore())
    await authorizer.create_acls([AclBinding(
        ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
        AclEntry("User:ops", "*", op, AclPermissionType.ALLOW))
        for op in (AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS)])
    return SimpleNamespace(security=SimpleNamespace(authorizer=authorizer),
                           controller=Controller(), log_dir_mover=Mover(),
                           client_metrics=Metrics())


async def call(broker, user, api_key, version, request):
    """The dispatcher's path: the handler, or its error response for a KafkaError."""
    ctx = SimpleNamespace(broker=broker, api_version=version, session=None,
                          principal=KafkaPrincipal("User", user),
                          client_address=("10.0.0.1", 5555),
                          header=SimpleNamespace(api_key=api_key))
    handler = REGISTRY.get(api_key)
    try:
        resp = handler.fn(ctx, request)
        return await resp if inspect.isawaitable(resp) else resp
    except KafkaError as e:
        return handler.error_response(request, version, e)


async def test_update_features_needs_alter_on_cluster():
    broker = await make_broker()
    req = UpdateFeaturesRequest(timeout_ms=1000, validate_only=False, feature_updates=[
        UpdateFeaturesRequest.FeatureUpdateKey(feature="group.version", max_version_level=1,
                                               upgrade_type=1)])
    resp = await call(broker, "eve", features.API_KEY, 1, req)
    assert resp.error_code == DENIED and resp.error_message == "Cluster authorization failed."
    assert resp.results == [] and broker.controller.updates == []
    resp = await call(broker, "ops", features.API_KEY, 1, req)
    assert resp.error_code == ErrorCode.NONE
    assert broker.controller.updates == [{"group.version": 1}]


async def test_alter_replica_log_dirs_needs_alter_on_cluster():
    broker = await make_broker()
    R = AlterReplicaLogDirsRequest
    req = R(dirs=[R.AlterReplicaLogDir(path="/d2", topics=[
        R.AlterReplicaLogDirTopic(name="t", partitions=[0, 1])])])
    resp = await call(broker, "eve", log_dirs.ALTER_REPLICA_LOG_DIRS, 2, req)
    assert [(t.topic_name, p.partition_index, p.error_code) for t in resp.results
            for p in t.partitions] == [("t", 0, DENIED), ("t", 1, DENIED)]
    assert broker.log_dir_mover.moves == []
    resp = await call(broker, "ops", log_dirs.ALTER_REPLICA_LOG_DIRS, 2, req)
    assert [p.error_code for t in resp.results for p in t.partitions] == [0, 0]
    assert broker.log_dir_mover.moves == [("/d2", [("t", 0), ("t", 1)])]


async def test_list_client_metrics_resources_needs_describe_configs_on_cluster():
    broker = await make_broker()
    key = configs.LIST_CONFIG_RESOURCES
    resp = await call(broker, "eve", key, 0, ListConfigResourcesRequest())
    assert resp.error_code == DENIED and resp.config_resources == []
    resp = await call(broker, "ops", key, 0, ListConfigResourcesRequest())
    assert resp.error_code == ErrorCode.NONE
    assert [r.resource_name for r in resp.config_resources] == ["cpu"]
    resp = await call(broker, "admin", key, 0, ListConfigResourcesRequest())
    assert resp.error_code == ErrorCode.NONE  # super user
