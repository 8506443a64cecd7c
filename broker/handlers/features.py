"""UpdateFeatures (api key 57) and the feature versions this broker supports (KIP-584).

Behaviour (Kafka's ``FeatureControlManager`` / ZooKeeper mode ``KafkaController
.processFeatureUpdates``): each update names a feature and a max version level; level 0
removes the finalized feature. Per feature: INVALID_REQUEST for a name given twice,
INVALID_UPDATE_VERSION for an unknown feature or a level outside the supported range,
and for a lower level than the finalized one unless the update allows a downgrade
(v0 ``allow_downgrade``, v1+ ``upgrade_type`` 2 safe / 3 unsafe; type 1 = upgrade only).
Authorization first: ALTER on the cluster, else a top-level CLUSTER_AUTHORIZATION_FAILED with
no per-feature results (``KafkaApis.handleUpdateFeatures``). Any per-feature error fails the whole request (top-level INVALID_UPDATE_VERSION is not
used: the errors are per feature and nothing is applied), as Kafka. ``validate_only``
(v1+) checks without applying. Applied levels are stored by the controller (``/feature``)
and show in ApiVersions' ``finalized_features`` with the document's epoch.

Supported features (``SUPPORTED_FEATURES``, Kafka 4.0's client-visible ones, up to what
Josef serves): ``group.version`` 0-1 (1 = the KIP-848 consumer protocol; a new cluster
starts at 1, ``controller.broker_config_admin.FeatureZNode.BOOTSTRAP``; at 0
ConsumerGroupHeartbeat/Describe answer UNSUPPORTED_VERSION, as Kafka's
``isConsumerGroupProtocolEnabled``), ``transaction.version`` 0-2 (1 = flexible transaction
log records; 2 = KIP-890 part 2: an epoch bump per transaction and implicit
AddPartitionsToTxn from Produce v12+, see ``coordinator/transaction/``),
``share.version`` 0-1 (1 = KIP-932 share groups, as Kafka 4.2 a new cluster starts at 1; at
0 the share-group APIs answer UNSUPPORTED_VERSION).

Version notes: v0-v2 (flexible); v1 ``upgrade_type`` and ``validate_only``; v2 leaves the
per-feature results out when everything succeeded (Kafka 4.0).
"""

from __future__ import annotations

from collections import Counter

from broker.handlers import authz
from broker.handlers.registry import error_code_response, handles
from protocol import api
from protocol.errors import ErrorCode

API_KEY = 57
UpdateFeaturesResponse = api.API_KEYS[API_KEY].response_cls
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    "group.version": (0, 1),
    "transaction.version": (0, 2),
    "share.version": (0, 1),
}
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def _check(name: str, level: int, downgrade_ok: bool, finalized: dict[str, int]
           ) -> tuple[ErrorCode, str | None]:
    supported = SUPPORTED_FEATURES.get(name)
    if supported is None:
        return ErrorCode.INVALID_UPDATE_VERSION, \
            f"Invalid update version {level} for feature {name}. The broker does not support it."
    lo, hi = supported
    if level != 0 and not lo <= level <= hi:
        return ErrorCode.INVALID_UPDATE_VERSION, \
            (f"Invalid update version {level} for feature {name}. Local broker supports "
             f"versions [{lo}-{hi}].")
    current = finalized.get(name, 0)
    if level < current and not downgrade_ok:
        return ErrorCode.INVALID_UPDATE_VERSION, \
            (f"Invalid update version {level} for feature {name}. Can't downgrade the version "
             f"of this feature without setting the upgrade type to either safe or unsafe "
             f"downgrade.")
    return ErrorCode.NONE, None


@handles(API_KEY, 0, 2, error_response=error_code_response(UpdateFeaturesResponse))
async def handle_update_features(ctx, request):
    if not authz.authorize_cluster(ctx, authz.AclOperation.ALTER):
        return UpdateFeaturesResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                      error_message="Cluster authorization failed.",
                                      results=[])
    version = ctx.api_version
    controller = ctx.broker.controller
    _, finalized = controller.finalized_features() if controller else (-1, {})
    names = Counter(u.feature for u in request.feature_updates)
    results = {}
    levels = {}
    for u in request.feature_updates:
        if names[u.feature] > 1:
            results[u.feature] = (ErrorCode.INVALID_REQUEST,
                                  f"Feature {u.feature} appears more than once in the request.")
            continue
        downgrade_ok = u.allow_downgrade if version == 0 else \
            u.upgrade_type in (SAFE_DOWNGRADE, UNSAFE_DOWNGRADE)
        if version >= 1 and u.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            results[u.feature] = (ErrorCode.INVALID_REQUEST,
                                  f"Unknown upgrade type {u.upgrade_type}")
            continue
        results[u.feature] = _check(u.feature, u.max_version_level, downgrade_ok, finalized)
        levels[u.feature] = u.max_version_level
    failed = any(code != ErrorCode.NONE for code, _ in results.values())
    validate_only = version >= 1 and request.validate_only
    if not failed and levels and not validate_only:
        if controller is None:
            return UpdateFeaturesResponse(error_code=int(ErrorCode.FEATURE_UPDATE_FAILED),
                                          error_message="no controller", results=[])
        try:
            await controller.update_features(levels)
        except (NotImplementedError, OSError) as e:  # no feature store / its write failed
            return UpdateFeaturesResponse(error_code=int(ErrorCode.FEATURE_UPDATE_FAILED),
                                          error_message=str(e), results=[])
    R = UpdateFeaturesResponse.UpdatableFeatureResult
    out = [R(feature=n, error_code=int(code), error_message=msg)
           for n, (code, msg) in results.items()]
    if version >= 2 and not failed:
        out = []
    return UpdateFeaturesResponse(error_code=0, error_message=None, results=out)


def finalized_level(broker, name: str) -> int:
    """The finalized max level of feature ``name`` (0 when not finalized)."""
    controller = getattr(broker, "controller", None)
    if controller is None:
        return 0
    return controller.finalized_features()[1].get(name, 0)


def api_versions_features(ctx) -> dict:
    """``supported_features`` / ``finalized_features_epoch`` / ``finalized_features`` of
    ApiVersions v3+ (KIP-584)."""
    from protocol import api as _api
    R = _api.API_KEYS[18].response_cls
    controller = getattr(ctx.broker, "controller", None)
    epoch, finalized = controller.finalized_features() if controller else (-1, {})
    return {
        "supported_features": [R.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                               for n, (lo, hi) in sorted(SUPPORTED_FEATURES.items())],
        "finalized_features_epoch": epoch,
        "finalized_features": [R.FinalizedFeatureKey(name=n, max_version_level=v,
                                                     min_version_level=v)
                               for n, v in sorted(finalized.items())],
    }
