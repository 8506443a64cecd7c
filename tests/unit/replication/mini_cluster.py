"""An in-process replication test bed: real `BrokerServer`s on 127.0.0.1 ephemeral ports
(each a full broker: network, handlers, ReplicaManager, replica fetchers, AlterPartition
sender) and a `StubController` that plays the controller's part the way Kafka's ZooKeeper
controller does for these tests: it holds each partition's state (leader, leader epoch, ISR,
partition epoch), sends LeaderAndIsr / UpdateMetadata to the brokers in-process, and answers
AlterPartition over TCP (leader epoch check -> FENCED_LEADER_EPOCH, partition epoch check ->
INVALID_UPDATE_VERSION, else commit with partition epoch + 1 and UpdateMetadata to every
broker). Elections are explicit calls (`elect`). The real controller (ZooKeeper mode) is
exercised by the integration tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

from broker.config import Endpoint, KafkaConfig
from broker.network import SocketServer
from broker.request_channel import Response
from broker.server import BrokerServer
from protocol import api
from protocol.errors import ErrorCode
from protocol.headers import decode_request_header, encode_response_header, response_header_version
from protocol.messages import (
    AlterPartitionResponse,
    ApiVersionsResponse,
    LeaderAndIsrRequest,
    UpdateMetadataRequest,
)

CONTROLLER_ID = 99
CONTROLLER_EPOCH = 100


@dataclasses.dataclass
class PartitionState:
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0


class StubController:
    def __init__(self, cluster: MiniCluster) -> None:
        self.cluster = cluster
        self.state: dict[tuple[str, int], PartitionState] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.server: SocketServer | None = None
        self.alter_partition_requests: list = []
        self.reject_with: int | None = None  # answer every AlterPartition partition with it

    async def start(self) -> None:
        self.server = SocketServer([Endpoint("PLAINTEXT", "127.0.0.1", 0)], self.handle)
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()

    def handle(self, request) -> Response:
        header, pos = decode_request_header(request.frame)
        body = api.decode_request(header.api_key, header.api_version, request.frame, pos)
        if header.api_key == 18:
            resp = ApiVersionsResponse(error_code=0, api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3),
                ApiVersionsResponse.ApiVersion(api_key=56, min_version=0, max_version=3)])
            hv = 0
        elif header.api_key == 56:
            resp = self.alter_partition(body, header.api_version)
            hv = response_header_version(56, header.api_version)
        else:
            return Response.close_connection()
        return Response([encode_response_header(header.correlation_id, hv),
                         api.encode_response(resp, header.api_version)])

    def alter_partition(self, req, version: int) -> AlterPartitionResponse:
        self.alter_partition_requests.append((version, req))
        names = {v: k for k, v in self.topic_ids.items()}
        topics = []
        changed = []
        for t in req.topics:
            name = names.get(t.topic_id) if version >= 2 else t.topic_name
            parts = []
            for p in t.partitions:
                st = self.state.get((name, p.partition_index))
                isr = [b.broker_id for b in p.new_isr_with_epochs] if version >= 3 \
                    else list(p.new_isr)
                if self.reject_with is not None:
                    code = self.reject_with
                elif st is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif p.leader_epoch != st.leader_epoch:
                    code = ErrorCode.FENCED_LEADER_EPOCH
                elif p.partition_epoch != st.partition_epoch:
                    code = ErrorCode.INVALID_UPDATE_VERSION
                else:
                    code = ErrorCode.NONE
                    st.isr = isr
                    st.partition_epoch += 1
                    changed.append((name, p.partition_index))
                parts.append(AlterPartitionResponse.PartitionData(
                    partition_index=p.partition_index, error_code=code,
                    leader_id=st.leader if st else -1,
                    leader_epoch=st.leader_epoch if st else -1,
                    isr=list(st.isr) if st else [],
                    partition_epoch=st.partition_epoch if st else -1))
            topics.append(AlterPartitionResponse.TopicData(topic_name=t.topic_name,
                                                           topic_id=t.topic_id,
                                                           partitions=parts))
        if changed:
            asyncio.get_running_loop().call_soon(
                lambda: asyncio.ensure_future(self.cluster.update_metadata()))
        return AlterPartitionResponse(error_code=0, topics=topics)


class MiniCluster:
    """`await MiniCluster.start(tmp_path, n=3, **broker_config)`; brokers have ids 1..n."""

    def __init__(self, tmp_path, n: int, overrides: dict, racks: dict | None = None) -> None:
        self.tmp_path = tmp_path
        self.ids = list(range(1, n + 1))
        self.overrides = overrides
        self.racks = racks or {}
        self.brokers: dict[int, BrokerServer] = {}
        self.controller = StubController(self)

    @classmethod
    async def start(cls, tmp_path, n: int = 3, racks: dict | None = None,
                    props: dict | None = None, **overrides) -> MiniCluster:
        """`overrides`: broker keys with dots written as underscores; `props`: keys as they
        are; `racks`: broker.rack by broker id."""
        merged = {k.replace("_", "."): str(v) for k, v in overrides.items()}
        merged.update(props or {})
        c = cls(tmp_path, n, merged, racks)
        await c.controller.start()
        for b in c.ids:
            await c.start_broker(b)
        await c.update_metadata()
        return c

    def config(self, broker_id: int) -> KafkaConfig:
        props = {"broker.id": str(broker_id), "listeners": "PLAINTEXT://127.0.0.1:0",
                 "log.dirs": str(self.tmp_path / f"broker-{broker_id}"),
                 "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "50"}
        props.update(self.overrides)
        if broker_id in self.racks:
            props["broker.rack"] = self.racks[broker_id]
        return KafkaConfig(props)

    async def start_broker(self, broker_id: int) -> BrokerServer:
        server = BrokerServer(self.config(broker_id))
        await server.startup()
        self.brokers[broker_id] = server
        return server

    async def stop_broker(self, broker_id: int) -> None:
        """A clean in-process stop (the broker's fetchers and connections go away)."""
        server = self.brokers.pop(broker_id)
        try:
            await asyncio.wait_for(asyncio.shield(server.shutdown()), 20)
        except TimeoutError:
            import sys
            for t in asyncio.all_tasks():
                t.print_stack(file=sys.stderr)
            raise

    async def shutdown(self) -> None:
        for b in list(self.brokers):
            await self.stop_broker(b)
        await self.controller.stop()

    def rm(self, broker_id: int):
        return self.brokers[broker_id].replica_manager

    def partition(self, broker_id: int, topic: str, p: int = 0):
        return self.rm(broker_id).get_partition(topic, p)

    # --- controller decisions -----------------------------------------------------------------
    async def create(self, topic: str, replicas: list[int], partitions: int = 1,
                     leader: int | None = None, configs: dict | None = None) -> None:
        self.controller.topic_ids.setdefault(topic, uuid.uuid4())
        for p in range(partitions):
            self.controller.state[(topic, p)] = PartitionState(
                list(replicas), replicas[0] if leader is None else leader, 0,
                [b for b in replicas if b in self.brokers])
        for b in self.brokers.values():
            b.replica_manager.on_topic_config_change(topic, configs or {})
        await self.update_metadata()
        await self.leader_and_isr(topic, range(partitions))

    async def elect(self, topic: str, p: int, leader: int, isr: list[int] | None = None
                    ) -> None:
        st = self.controller.state[(topic, p)]
        st.leader = leader
        st.leader_epoch += 1
        st.partition_epoch += 1
        if isr is not None:
            st.isr = list(isr)
        await self.update_metadata()
        await self.leader_and_isr(topic, [p])

    async def leader_and_isr(self, topic: str, partitions, brokers=None) -> None:
        by_broker: dict[int, list] = {}
        for p in partitions:
            st = self.controller.state[(topic, p)]
            ps = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                topic_name=topic, partition_index=p, controller_epoch=CONTROLLER_EPOCH,
                leader=st.leader, leader_epoch=st.leader_epoch, isr=list(st.isr),
                partition_epoch=st.partition_epoch, replicas=list(st.replicas),
                adding_replicas=[], removing_replicas=[], is_new=False)
            for b in st.replicas:
                by_broker.setdefault(b, []).append(ps)
        for b, states in by_broker.items():
            if b not in self.brokers or (brokers is not None and b not in brokers):
                continue
            req = LeaderAndIsrRequest(
                controller_id=CONTROLLER_ID, controller_epoch=CONTROLLER_EPOCH, broker_epoch=-1,
                type=1, topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name=topic, topic_id=self.controller.topic_ids[topic],
                    partition_states=states)], live_leaders=[])
            await self.rm(b).become_leader_or_follower(req)

    async def update_metadata(self) -> None:
        ctrl = self.controller
        live = [UpdateMetadataRequest.UpdateMetadataBroker(
            id=CONTROLLER_ID, endpoints=[UpdateMetadataRequest.UpdateMetadataEndpoint(
                port=ctrl.server.port(), host="127.0.0.1", listener="PLAINTEXT",
                security_protocol=0)], rack=None)]
        for b, server in self.brokers.items():
            live.append(UpdateMetadataRequest.UpdateMetadataBroker(
                id=b, endpoints=[UpdateMetadataRequest.UpdateMetadataEndpoint(
                    port=ep.port, host=ep.host, listener=name,
                    security_protocol=ep.security_protocol_id)
                    for name, ep in server.services.advertised.items()],
                rack=server.config.broker_rack))
        topics: dict[str, list] = {}
        for (topic, p), st in ctrl.state.items():
            topics.setdefault(topic, []).append(UpdateMetadataRequest.UpdateMetadataPartitionState(
                topic_name=topic, partition_index=p, controller_epoch=CONTROLLER_EPOCH,
                leader=st.leader if st.leader in self.brokers else -1,
                leader_epoch=st.leader_epoch, isr=list(st.isr), zk_version=st.partition_epoch,
                replicas=list(st.replicas),
                offline_replicas=[r for r in st.replicas if r not in self.brokers]))
        req = UpdateMetadataRequest(
            controller_id=CONTROLLER_ID, controller_epoch=CONTROLLER_EPOCH, broker_epoch=-1,
            type=1, topic_states=[UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name=t, topic_id=ctrl.topic_ids[t], partition_states=ps)
                for t, ps in topics.items()], live_brokers=live)
        for server in self.brokers.values():
            server.metadata_cache.update_metadata(req)


async def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    """Poll `predicate()` every 10 ms until true; AssertionError after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
