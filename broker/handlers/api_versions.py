"""ApiVersions (api key 18): which API keys and versions this broker serves.

Behaviour: the list is derived from the handler registry (``REGISTRY.supported()``), so the
broker never advertises a version nobody handles. ``throttle_time_ms`` is 0. A v3+ request
whose ``client_software_name`` / ``client_software_version`` is empty or not
``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?`` gets INVALID_REQUEST (42) with an empty list,
as Kafka's ``ApiVersionsRequest.isValid`` (KIP-511).

Version notes: v0-v4 (v3+ flexible; the response header is always v0). v3+ carries the
KIP-584 tagged fields SupportedFeatures, FinalizedFeaturesEpoch and FinalizedFeatures
(``broker.handlers.features``; a Kafka 3.9 broker sends them too). A version above 4 never
reaches this handler: the dispatcher answers it with UNSUPPORTED_VERSION (35) and the
supported ranges in a v0 body.
"""

from __future__ import annotations

import re

from broker.handlers.features import api_versions_features
from broker.handlers.registry import REGISTRY, handles
from protocol import api
from protocol.errors import ErrorCode, KafkaError

API_VERSIONS = 18

ApiVersionsResponse = api.API_KEYS[API_VERSIONS].response_cls
_SOFTWARE_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def supported_api_versions() -> list:
    """``ApiVersionsResponse.ApiVersion`` entries for every registered API, by key."""
    cls = ApiVersionsResponse.ApiVersion
    return [cls(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in REGISTRY.supported()]


def is_valid_client_software(name: str | None, version: str | None) -> bool:
    """Kafka's check of the v3+ client software name and version (both non-empty, KIP-511)."""
    return bool(name and version and _SOFTWARE_RE.fullmatch(name)
                and _SOFTWARE_RE.fullmatch(version))


def error_response(request, version: int, error: KafkaError):
    """Kafka's ``ApiVersionsRequest.getErrorResponse``: the code; the ranges only for
    UNSUPPORTED_VERSION."""
    keys = supported_api_versions() if error.code == ErrorCode.UNSUPPORTED_VERSION else []
    return ApiVersionsResponse(error_code=int(error.code), api_keys=keys)


@handles(API_VERSIONS, 0, 4, error_response=error_response)
def handle_api_versions(ctx, request):
    if ctx.api_version >= 3 and not is_valid_client_software(
            request.client_software_name, request.client_software_version):
        return ApiVersionsResponse(error_code=int(ErrorCode.INVALID_REQUEST), api_keys=[])
    extra = api_versions_features(ctx) if ctx.api_version >= 3 else {}
    return ApiVersionsResponse(error_code=0, api_keys=supported_api_versions(), **extra)
