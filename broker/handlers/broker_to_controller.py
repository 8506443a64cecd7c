"""ControlledShutdown (7) and AlterPartition (56): requests brokers send to the controller.

Behaviour (Kafka's ZooKeeper-mode KafkaApis and KafkaController):
- ControlledShutdown: ``controller.controlled_shutdown(broker_id, broker_epoch)`` moves every
  leadership the broker holds (replication factor > 1) to another live ISR member and takes
  it out of the ISRs it follows; the response lists the partitions it still leads (empty =
  done). NOT_CONTROLLER (14) on a broker that is not the controller, STALE_BROKER_EPOCH (77),
  BROKER_NOT_AVAILABLE (8) for an unregistered broker. Embedded mode: the broker itself is
  the only broker and leads nothing that could move.
- AlterPartition (KIP-497): a partition leader asks to change its ISR;
  ``controller.alter_partition(request, version)`` validates it as Kafka does (see
  controller.leadership) and answers the new state per partition. NOT_CONTROLLER and
  STALE_BROKER_EPOCH are top-level errors.

Authorization: CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes: ControlledShutdown v0-v3 (v0 uses request header v0; v2 broker epoch; v3
flexible). AlterPartition v0-v3 (v1 leader recovery state, v2 topic ids, v3 ISR with broker
epochs, KIP-903).
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import error_code_response, handles
from protocol import api

CONTROLLED_SHUTDOWN, ALTER_PARTITION = 7, 56
ControlledShutdownResponse = api.API_KEYS[CONTROLLED_SHUTDOWN].response_cls
AlterPartitionResponse = api.API_KEYS[ALTER_PARTITION].response_cls


@handles(CONTROLLED_SHUTDOWN, 0, 3,
         error_response=error_code_response(ControlledShutdownResponse))
async def handle_controlled_shutdown(ctx, request):
    authz.require_cluster(ctx, authz.AclOperation.CLUSTER_ACTION)
    broker_epoch = request.broker_epoch if ctx.api_version >= 2 else -1
    code, remaining = await ctx.broker.controller.controlled_shutdown(request.broker_id,
                                                                      broker_epoch)
    return ControlledShutdownResponse(error_code=int(code), remaining_partitions=[
        ControlledShutdownResponse.RemainingPartition(topic_name=t, partition_index=p)
        for t, p in remaining])


@handles(ALTER_PARTITION, 0, 3, error_response=error_code_response(AlterPartitionResponse))
async def handle_alter_partition(ctx, request):
    authz.require_cluster(ctx, authz.AclOperation.CLUSTER_ACTION)
    return await ctx.broker.controller.alter_partition(request, ctx.api_version)
