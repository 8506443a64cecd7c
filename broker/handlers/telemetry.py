"""GetTelemetrySubscriptions (71), PushTelemetry (72): KIP-714 client metrics (the
subscriptions themselves are config resources: DescribeConfigs / IncrementalAlterConfigs and
ListConfigResources in ``broker.handlers.configs``).

Behaviour with subscriptions (``broker.client_metrics``, ``ctx.broker.client_metrics``):
the subscriptions matching the client decide the requested metric prefixes, the push
interval and the subscription id; pushed OTLP metrics are decoded and kept in the
ClientMetricsRegistry (see that module for the errors). Without a manager (tests building handlers alone) the broker
answers as one without subscriptions:
- GetTelemetrySubscriptions: error NONE; the client's instance id (a new random UUID when the
  client sent the zero UUID: KIP-714 lets the broker assign it); a subscription id derived
  from that instance id (stateless, so any IO worker can check it); accepted compression
  types zstd, lz4, gzip, snappy (Kafka's preference order); push interval 300000 ms (Kafka's
  default when no subscription matches); ``telemetry.max.bytes`` (1048576) as the size limit;
  delta temporality true; and NO requested metrics. With an empty metric list a client
  (confluent-kafka/librdkafka, the Java client) pushes nothing and only asks again after the
  push interval: no error, no traffic.
- PushTelemetry: the zero instance id -> INVALID_REQUEST (42); a subscription id that is not
  the one we gave that instance -> UNKNOWN_SUBSCRIPTION_ID (117); a metrics payload above the
  limit -> TELEMETRY_TOO_LARGE (118); otherwise NONE (there is no telemetry receiver, the
  metrics are dropped).

Authorization: none (as in Kafka).

Version notes: v0 only (flexible), Kafka 3.7+.
"""

from __future__ import annotations

import uuid
import zlib

from broker.client_metrics import client_identity
from broker.handlers.registry import error_code_response, handles
from protocol import api
from protocol.errors import ErrorCode

GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY = 71, 72
GetTelemetrySubscriptionsResponse = api.API_KEYS[GET_TELEMETRY_SUBSCRIPTIONS].response_cls
PushTelemetryResponse = api.API_KEYS[PUSH_TELEMETRY].response_cls

ZERO_UUID = uuid.UUID(int=0)
DEFAULT_PUSH_INTERVAL_MS = 300_000
DEFAULT_TELEMETRY_MAX_BYTES = 1_048_576
ACCEPTED_COMPRESSION_TYPES = [4, 3, 1, 2]  # zstd, lz4, gzip, snappy
_SUBSCRIPTION_SALT = b"josef:no-client-metrics:%d" % DEFAULT_PUSH_INTERVAL_MS


def subscription_id(client_instance_id: uuid.UUID) -> int:
    """The (empty) subscription's id for this client instance: CRC32 as a signed int32."""
    v = zlib.crc32(client_instance_id.bytes + _SUBSCRIPTION_SALT)
    return v - (1 << 32) if v >= 1 << 31 else v


def _max_bytes(ctx) -> int:
    try:
        return int(ctx.broker.config.get("telemetry.max.bytes"))
    except (KeyError, TypeError, ValueError, AttributeError):
        return DEFAULT_TELEMETRY_MAX_BYTES


@handles(GET_TELEMETRY_SUBSCRIPTIONS, 0, 0, error_response=error_code_response(
    GetTelemetrySubscriptionsResponse))
def handle_get_telemetry_subscriptions(ctx, request):
    instance = request.client_instance_id
    if instance is None or instance == ZERO_UUID:
        instance = uuid.uuid4()
    manager = getattr(ctx.broker, "client_metrics", None)
    if manager is None:
        sub_id, requested, interval = subscription_id(instance), [], DEFAULT_PUSH_INTERVAL_MS
    else:
        sub_id, requested, interval = manager.subscription_for(
            client_identity(ctx, instance))
    return GetTelemetrySubscriptionsResponse(
        error_code=0, client_instance_id=instance, subscription_id=sub_id,
        accepted_compression_types=list(ACCEPTED_COMPRESSION_TYPES),
        push_interval_ms=interval, telemetry_max_bytes=_max_bytes(ctx),
        delta_temporality=True, requested_metrics=requested)


@handles(PUSH_TELEMETRY, 0, 0, error_response=error_code_response(PushTelemetryResponse))
def handle_push_telemetry(ctx, request):
    instance = request.client_instance_id
    manager = getattr(ctx.broker, "client_metrics", None)
    if instance is None or instance == ZERO_UUID:
        code = ErrorCode.INVALID_REQUEST
    elif manager is not None:
        code = manager.push(client_identity(ctx, instance), request.subscription_id,
                            request.compression_type, request.metrics, request.terminating)
    elif request.subscription_id != subscription_id(instance):
        code = ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    elif request.metrics is not None and len(request.metrics) > _max_bytes(ctx):
        code = ErrorCode.TELEMETRY_TOO_LARGE
    else:
        code = ErrorCode.NONE
    return PushTelemetryResponse(error_code=int(code))
