"""Znode paths and JSON codecs: Kafka's ZooKeeper-mode metadata layout.

One definition per znode, each holding its ``path`` and its ``encode``/``decode`` (Kafka's
``ZkData``). The embedded single-node store (:mod:`controller.metadata_store`) keeps exactly
these documents keyed by these paths, so the ZooKeeper controller reuses every codec and only
swaps the storage. JSON is written compactly (``{"a":1}``) as Kafka's Jackson writer does.

Layout (Kafka 3.x, ZooKeeper mode)::

  /cluster/id                                   {"version":"1","id":"<22-char base64 uuid>"}
  /controller                       (ephemeral) {"version":2,"brokerid":1,"timestamp":"<ms>",
                                                 "kraftControllerEpoch":-1}
  /controller_epoch                             "7"  (decimal text, conditional set)
  /brokers/ids/<id>                 (ephemeral) {"version":5,"host":h,"port":p,"jmx_port":-1,
                                                 "timestamp":"<ms>","endpoints":["PLAINTEXT://h:p"],
                                                 "listener_security_protocol_map":{..},
                                                 "features":{} [,"rack":r]}
  /brokers/seqid                                (empty; its version generates broker ids)
  /brokers/topics/<t>                           {"version":3,"partitions":{"0":[1,2]},
                                                 "adding_replicas":{},"removing_replicas":{},
                                                 "topic_id":"<base64 uuid>"}
  /brokers/topics/<t>/partitions/<p>/state      {"version":1,"leader":1,"leader_epoch":0,
                                                 "controller_epoch":1,"isr":[1,2]}
  /config/topics/<t>                            {"version":1,"config":{"k":"v"}}
  /config/changes/config_change_<seq10>         {"version":2,"entity_path":"topics/<t>"}
  /admin/delete_topics/<t>                      (empty)
  /admin/preferred_replica_election             {"version":1,"partitions":[{"topic":t,"partition":p}]}
  /admin/reassign_partitions                    {"version":1,"partitions":[{"topic":t,
                                                 "partition":p,"replicas":[..]}]}
  /isr_change_notification/isr_change_<seq10>   {"version":1,"partitions":[{"topic":t,"partition":p}]}
  /latest_producer_id_block                     {"version":1,"broker":1,"block_start":"0",
                                                 "block_end":"999"}

The first replica of a partition's list is its preferred leader. ``stat.version`` of a
partition state znode is the partition epoch (``zkVersion`` in LeaderAndIsr/UpdateMetadata).
Decoding malformed bytes raises :class:`ZkDataError` (a ``ValueError``) naming the znode.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from controller.kafka_uuid import InvalidUuidError, from_base64, to_base64

# LeaderAndIsr sentinels (Kafka's LeaderAndIsr object).
NO_LEADER = -1
LEADER_DURING_DELETE = -2
EPOCH_DURING_DELETE = -2
INITIAL_LEADER_EPOCH = 0
INITIAL_PARTITION_EPOCH = 0

# Security protocol ids as carried by UpdateMetadata endpoints (Kafka's SecurityProtocol).
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


class ZkVersion:
    """``expected_version`` values for conditional writes (Kafka's ``ZkVersion``)."""

    MATCH_ANY = -1  # conditional set/delete that matches any version
    UNKNOWN = -2  # version reported for a znode that does not exist


class ZkDataError(ValueError):
    """A znode holds bytes its codec cannot read."""


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _loads(data: bytes | None, what: str) -> Any:
    if data is None:
        raise ZkDataError(f"{what}: znode has no data")
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZkDataError(f"{what}: not JSON: {exc}") from exc


def _obj(data: bytes | None, what: str) -> dict[str, Any]:
    doc = _loads(data, what)
    if not isinstance(doc, dict):
        raise ZkDataError(f"{what}: expected a JSON object")
    return doc


def _field(doc: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if key not in doc:
        raise ZkDataError(f"{what}: missing key {key!r}")
    value = doc[key]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise ZkDataError(f"{what}: key {key!r} has the wrong type ({type(value).__name__})")
    return value


_INT_TYPE = frozenset({int})


def _int_list(value: Any, what: str) -> list[int]:
    # the element-type check in C (set of types): a failover reads 300,000 replica lists
    if type(value) is not list or not _INT_TYPE.issuperset(map(type, value)):
        raise ZkDataError(f"{what}: expected a list of integers")
    return value


def _int_text(value: Any, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ZkDataError(f"{what}: not a decimal integer: {value!r}") from exc


# --------------------------------------------------------------------------- value types


@dataclass(frozen=True)
class Endpoint:
    """One listener: ``<listener_name>://<host>:<port>`` with its security protocol name (Kafka's
    Endpoint). The one endpoint type: ``KafkaConfig.listeners`` / ``advertised_listeners``,
    ``broker.network.SocketServer`` and the ``/brokers/ids/<id>`` registration share it.

    ``host`` is ``""`` to bind all interfaces (Kafka's ``PLAINTEXT://:9092``); ``port`` 0
    asks the OS for an ephemeral port.
    """

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    __str__ = connection_string

    @property
    def security_protocol_id(self) -> int:
        """The id UpdateMetadata carries (Kafka's SecurityProtocol: PLAINTEXT 0 ... SASL_SSL 3)."""
        return SECURITY_PROTOCOL_IDS[self.security_protocol]


_ENDPOINT_RE = re.compile(r"^([A-Za-z0-9_.-]+)://\[?([0-9A-Za-z%._:-]*?)\]?:(-?[0-9]+)$")


def parse_endpoint(text: str, protocol_map: dict[str, str] | None = None) -> Endpoint:
    """Parse ``LISTENER://host:port`` (IPv6 hosts in brackets); the security protocol comes
    from ``protocol_map`` (listener name -> protocol) or is the listener name itself."""
    match = _ENDPOINT_RE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ZkDataError(f"endpoint {text!r} is not LISTENER://host:port")
    name, host, port = match.group(1), match.group(2), int(match.group(3))
    protocol = (protocol_map or {}).get(name, name)
    if protocol not in SECURITY_PROTOCOL_IDS:
        raise ZkDataError(f"endpoint {text!r}: unknown security protocol {protocol!r}")
    return Endpoint(name, host, port, protocol)


@dataclass(frozen=True)
class BrokerInfo:
    """A broker registration (``/brokers/ids/<id>``)."""

    id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    features: dict[str, Any] = field(default_factory=dict, compare=False)


class ReplicaAssignment(NamedTuple):
    """Replicas of one partition; ``replicas[0]`` is the preferred leader. A NamedTuple
    (immutable; built in C, unlike a frozen dataclass): a controller failover reads
    100,000 of them."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicAssignment:
    """``/brokers/topics/<t>``: topic ID and the replica assignment per partition."""

    topic_id: uuid.UUID | None
    partitions: dict[int, ReplicaAssignment]


class LeaderIsrAndControllerEpoch(NamedTuple):
    """Partition state (``.../partitions/<p>/state``) plus its znode version.

    ``partition_epoch`` is the state znode's ``stat.version`` (Kafka's ``zkVersion``); it is
    not part of the JSON and rises by one on every write of the state. A NamedTuple
    (immutable, cheap to build): a failover makes a few hundred thousand of them.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    partition_epoch: int = INITIAL_PARTITION_EPOCH
    #: LeaderRecoveryState: 0 RECOVERED, 1 RECOVERING (after an unclean election, KIP-704);
    #: written as ``leader_recovery_state`` only when not RECOVERED, as Kafka does.
    leader_recovery_state: int = 0


@dataclass(frozen=True)
class ProducerIdBlock:
    """A block of producer IDs ``[block_start, block_end]`` (inclusive) owned by a broker."""

    broker: int
    block_start: int
    block_end: int

    @property
    def size(self) -> int:
        return self.block_end - self.block_start + 1


# --------------------------------------------------------------------------- znodes


class ClusterZNode:
    path = "/cluster"


class ClusterIdZNode:
    path = "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _dumps({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes | None) -> str:
        return _field(_obj(data, "/cluster/id"), "id", str, "/cluster/id")


class ControllerZNode:
    path = "/controller"

    @staticmethod
    def encode(broker_id: int, timestamp_ms: int, kraft_controller_epoch: int = -1) -> bytes:
        return _dumps(
            {
                "version": 2,
                "brokerid": broker_id,
                "timestamp": str(timestamp_ms),
                "kraftControllerEpoch": kraft_controller_epoch,
            }
        )

    @staticmethod
    def decode(data: bytes | None) -> int:
        """The controller's broker id."""
        return _field(_obj(data, "/controller"), "brokerid", int, "/controller")


class ControllerEpochZNode:
    path = "/controller_epoch"

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode("ascii")

    @staticmethod
    def decode(data: bytes | None) -> int:
        if data is None:
            raise ZkDataError("/controller_epoch: znode has no data")
        return _int_text(bytes(data).decode("ascii", "replace"), "/controller_epoch")


class BrokersZNode:
    path = "/brokers"


class BrokerIdsZNode:
    path = "/brokers/ids"


class BrokerSequenceIdZNode:
    path = "/brokers/seqid"


class BrokerIdZNode:
    """``/brokers/ids/<id>``, JSON version 5. ``rack`` is present only when set."""

    @staticmethod
    def path(broker_id: int) -> str:
        return f"{BrokerIdsZNode.path}/{broker_id}"

    @staticmethod
    def encode(info: BrokerInfo) -> bytes:
        plaintext = next((e for e in info.endpoints if e.security_protocol == "PLAINTEXT"), None)
        doc: dict[str, Any] = {
            "version": 5,
            "host": plaintext.host if plaintext else None,
            "port": plaintext.port if plaintext else -1,
            "jmx_port": info.jmx_port,
            "timestamp": str(info.timestamp_ms),
            "endpoints": [e.connection_string() for e in info.endpoints],
            "listener_security_protocol_map": {
                e.listener_name: e.security_protocol for e in info.endpoints
            },
            "features": dict(info.features),
        }
        if info.rack is not None:
            doc["rack"] = info.rack
        return _dumps(doc)

    @staticmethod
    def decode(broker_id: int, data: bytes | None) -> BrokerInfo:
        what = BrokerIdZNode.path(broker_id)
        doc = _obj(data, what)
        protocol_map = doc.get("listener_security_protocol_map") or {}
        if not isinstance(protocol_map, dict):
            raise ZkDataError(f"{what}: listener_security_protocol_map is not an object")
        endpoints = _field(doc, "endpoints", list, what)
        rack = doc.get("rack")
        if rack is not None and not isinstance(rack, str):
            raise ZkDataError(f"{what}: rack is not a string")
        return BrokerInfo(
            id=broker_id,
            endpoints=tuple(parse_endpoint(e, protocol_map) for e in endpoints),
            rack=rack,
            jmx_port=doc.get("jmx_port", -1),
            timestamp_ms=_int_text(doc.get("timestamp", "0"), what),
            features=doc.get("features") or {},
        )


class TopicsZNode:
    path = "/brokers/topics"


class TopicZNode:
    """``/brokers/topics/<t>``, JSON version 3 (2 + ``topic_id``)."""

    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicsZNode.path}/{topic}"

    @staticmethod
    def encode(assignment: TopicAssignment) -> bytes:
        parts = sorted(assignment.partitions.items())
        doc: dict[str, Any] = {
            "version": 3,
            "partitions": {str(p): list(a.replicas) for p, a in parts},
            "adding_replicas": {str(p): list(a.adding_replicas) for p, a in parts if a.adding_replicas},
            "removing_replicas": {
                str(p): list(a.removing_replicas) for p, a in parts if a.removing_replicas
            },
        }
        if assignment.topic_id is not None:
            doc["topic_id"] = to_base64(assignment.topic_id)
        return _dumps(doc)

    @staticmethod
    def decode(topic: str, data: bytes | None) -> TopicAssignment:
        what = TopicZNode.path(topic)
        doc = _obj(data, what)
        topic_id = None
        if doc.get("topic_id") is not None:
            try:
                topic_id = from_base64(doc["topic_id"])
            except InvalidUuidError as exc:
                raise ZkDataError(f"{what}: {exc}") from exc
        partitions_doc = _field(doc, "partitions", dict, what)
        adding = doc.get("adding_replicas") or {}
        removing = doc.get("removing_replicas") or {}
        partitions: dict[int, ReplicaAssignment] = {}
        # one (immutable) ReplicaAssignment per distinct replica list: a topic's partitions
        # repeat a few lists, and a failover reads 100,000 of them
        shared: dict[tuple[int, ...], ReplicaAssignment] = {}
        for key, replicas in partitions_doc.items():
            p = _int_text(key, what)
            ids = tuple(_int_list(replicas, what))
            if (adding or removing) and (key in adding or key in removing):
                partitions[p] = ReplicaAssignment(
                    ids, tuple(_int_list(adding.get(key, []), what)),
                    tuple(_int_list(removing.get(key, []), what)))
                continue
            a = shared.get(ids)
            if a is None:
                a = shared[ids] = ReplicaAssignment(ids)
            partitions[p] = a
        return TopicAssignment(topic_id, dict(sorted(partitions.items())))


class TopicPartitionsZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicsZNode.path}/{topic}/partitions"


class TopicPartitionZNode:
    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicsZNode.path}/{topic}/partitions/{partition}"


#: ISR tuple -> its JSON list body (b"1,2,3"): a cluster has a few hundred distinct ISRs
_ISR_TEXT: dict[tuple, bytes] = {}
#: the state znode without its closing brace (``%d`` formats ints as ``int()`` would)
_STATE_JSON = b'{"version":1,"leader":%d,"leader_epoch":%d,"controller_epoch":%d,"isr":[%s]'


class TopicPartitionStateZNode:
    """``/brokers/topics/<t>/partitions/<p>/state``, JSON version 1."""

    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicsZNode.path}/{topic}/partitions/{partition}/state"

    @staticmethod
    def encode(state: LeaderIsrAndControllerEpoch) -> bytes:
        """``{"version":1,"leader":L,"leader_epoch":E,"controller_epoch":C,"isr":[..]}`` (+
        ``"leader_recovery_state":1`` when RECOVERING), the bytes ``json.dumps`` would give,
        formatted directly: a failover writes 100,000 of them."""
        key = state.isr if type(state.isr) is tuple else tuple(state.isr)
        isr = _ISR_TEXT.get(key)
        if isr is None:
            if len(_ISR_TEXT) >= 4096:
                _ISR_TEXT.clear()
            isr = _ISR_TEXT[key] = ",".join([str(int(r)) for r in key]).encode()
        body = _STATE_JSON % (state.leader, state.leader_epoch, state.controller_epoch, isr)
        recovery = state.leader_recovery_state
        return body + b',"leader_recovery_state":%d}' % recovery if recovery else body + b"}"

    #: decoded states by (raw JSON, znode version): a cluster's states repeat a few shapes
    #: (leader, ISR, epochs), and a controller failover decodes 100,000 of them
    _memo: dict[tuple[bytes, int], LeaderIsrAndControllerEpoch] = {}
    MEMO_SIZE = 4096

    @staticmethod
    def decode(data: bytes | None, zk_version: int) -> LeaderIsrAndControllerEpoch:
        memo = TopicPartitionStateZNode._memo
        key = (bytes(data), zk_version) if data is not None else None
        got = memo.get(key) if key is not None else None
        if got is None:
            got = TopicPartitionStateZNode._decode(data, zk_version)
            if len(memo) >= TopicPartitionStateZNode.MEMO_SIZE:
                memo.clear()
            memo[key] = got
        return got

    @staticmethod
    def _decode(data: bytes | None, zk_version: int) -> LeaderIsrAndControllerEpoch:
        what = "partition state"
        doc = _obj(data, what)
        recovery = doc.get("leader_recovery_state", 0)
        if not isinstance(recovery, int) or isinstance(recovery, bool) or recovery not in (0, 1):
            raise ZkDataError(f"{what}: bad leader_recovery_state {recovery!r}")
        return LeaderIsrAndControllerEpoch(
            leader=_field(doc, "leader", int, what),
            leader_epoch=_field(doc, "leader_epoch", int, what),
            isr=tuple(_int_list(_field(doc, "isr", list, what), what)),
            controller_epoch=_field(doc, "controller_epoch", int, what),
            partition_epoch=zk_version,
            leader_recovery_state=recovery,
        )


class ConfigZNode:
    path = "/config"


class ConfigEntityTypeZNode:
    @staticmethod
    def path(entity_type: str) -> str:
        return f"{ConfigZNode.path}/{entity_type}"


class ConfigEntityZNode:
    """``/config/<type>/<name>`` (``type`` = ``topics``, ``brokers``, ...), JSON version 1."""

    @staticmethod
    def path(entity_type: str, entity_name: str) -> str:
        return f"{ConfigEntityTypeZNode.path(entity_type)}/{entity_name}"

    @staticmethod
    def encode(config: dict[str, str]) -> bytes:
        return _dumps({"version": 1, "config": dict(sorted(config.items()))})

    @staticmethod
    def decode(data: bytes | None) -> dict[str, str]:
        if data is None:
            return {}
        doc = _obj(data, "config entity")
        config = doc.get("config") or {}
        if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
            raise ZkDataError("config entity: 'config' is not an object of strings")
        return dict(config)


class ConfigEntityChangeNotificationZNode:
    path = "/config/changes"


class ConfigEntityChangeNotificationSequenceZNode:
    """Sequential ``/config/changes/config_change_<seq>`` announcing a config change."""

    SEQUENCE_PREFIX = "config_change_"
    create_path = f"{ConfigEntityChangeNotificationZNode.path}/{SEQUENCE_PREFIX}"

    @staticmethod
    def encode(entity_path: str) -> bytes:
        return _dumps({"version": 2, "entity_path": entity_path})

    @staticmethod
    def decode(data: bytes | None) -> str:
        what = "config change notification"
        return _field(_obj(data, what), "entity_path", str, what)


class AdminZNode:
    path = "/admin"


class DeleteTopicsZNode:
    path = "/admin/delete_topics"


class DeleteTopicsTopicZNode:
    """``/admin/delete_topics/<t>``: a pending topic deletion (no data)."""

    @staticmethod
    def path(topic: str) -> str:
        return f"{DeleteTopicsZNode.path}/{topic}"


def _encode_partitions(version: int, partitions: list[tuple[str, int]]) -> bytes:
    return _dumps(
        {"version": version, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
    )


def _decode_partitions(data: bytes | None, what: str) -> list[tuple[str, int]]:
    items = _field(_obj(data, what), "partitions", list, what)
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise ZkDataError(f"{what}: partition entry is not an object")
        out.append((_field(item, "topic", str, what), _field(item, "partition", int, what)))
    return out


class PreferredReplicaElectionZNode:
    path = "/admin/preferred_replica_election"

    @staticmethod
    def encode(partitions: list[tuple[str, int]]) -> bytes:
        return _encode_partitions(1, partitions)

    @staticmethod
    def decode(data: bytes | None) -> list[tuple[str, int]]:
        return _decode_partitions(data, PreferredReplicaElectionZNode.path)


class ReassignPartitionsZNode:
    path = "/admin/reassign_partitions"

    @staticmethod
    def encode(reassignment: dict[tuple[str, int], list[int]]) -> bytes:
        return _dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": t, "partition": p, "replicas": list(r)}
                    for (t, p), r in reassignment.items()
                ],
            }
        )

    @staticmethod
    def decode(data: bytes | None) -> dict[tuple[str, int], list[int]]:
        what = ReassignPartitionsZNode.path
        items = _field(_obj(data, what), "partitions", list, what)
        out = {}
        for item in items:
            if not isinstance(item, dict):
                raise ZkDataError(f"{what}: partition entry is not an object")
            key = (_field(item, "topic", str, what), _field(item, "partition", int, what))
            out[key] = _int_list(_field(item, "replicas", list, what), what)
        return out


class IsrChangeNotificationZNode:
    path = "/isr_change_notification"


class IsrChangeNotificationSequenceZNode:
    SEQUENCE_PREFIX = "isr_change_"
    create_path = f"{IsrChangeNotificationZNode.path}/{SEQUENCE_PREFIX}"

    @staticmethod
    def encode(partitions: list[tuple[str, int]]) -> bytes:
        return _encode_partitions(1, partitions)

    @staticmethod
    def decode(data: bytes | None) -> list[tuple[str, int]]:
        return _decode_partitions(data, IsrChangeNotificationZNode.path)


class ProducerIdBlockZNode:
    """``/latest_producer_id_block``: the last block handed out; ids are decimal strings."""

    path = "/latest_producer_id_block"

    @staticmethod
    def encode(block: ProducerIdBlock) -> bytes:
        return _dumps(
            {
                "version": 1,
                "broker": block.broker,
                "block_start": str(block.block_start),
                "block_end": str(block.block_end),
            }
        )

    @staticmethod
    def decode(data: bytes | None) -> ProducerIdBlock:
        what = ProducerIdBlockZNode.path
        doc = _obj(data, what)
        return ProducerIdBlock(
            broker=_field(doc, "broker", int, what),
            block_start=_int_text(_field(doc, "block_start", str, what), what),
            block_end=_int_text(_field(doc, "block_end", str, what), what),
        )


class LogDirEventNotificationZNode:
    path = "/log_dir_event_notification"


class LogDirEventNotificationSequenceZNode:
    """``/log_dir_event_notification/log_dir_event_<seq>`` (persistent sequential), written
    by a broker whose log dir failed (KIP-112): ``{"version":1,"broker":N,"event":1}``
    (event 1 = LogDirFailure); the controller reads and deletes them."""

    SEQUENCE_PREFIX = "log_dir_event_"
    LOG_DIR_FAILURE_EVENT = 1
    create_path = f"{LogDirEventNotificationZNode.path}/{SEQUENCE_PREFIX}"

    @staticmethod
    def encode(broker_id: int) -> bytes:
        return _dumps({"version": 1, "broker": broker_id,
                       "event": LogDirEventNotificationSequenceZNode.LOG_DIR_FAILURE_EVENT})

    @staticmethod
    def decode(data: bytes | None) -> int:
        """The broker id."""
        what = LogDirEventNotificationZNode.path
        return _field(_obj(data, what), "broker", int, what)


class ConsumerPathZNode:
    """The old consumers' path; Kafka still creates it on startup."""

    path = "/consumers"


# Persistent paths every cluster has (Kafka's ``ZkData.PersistentZkPaths``).
PERSISTENT_ZK_PATHS = (
    ConsumerPathZNode.path,
    BrokerIdsZNode.path,
    TopicsZNode.path,
    ConfigEntityChangeNotificationZNode.path,
    DeleteTopicsZNode.path,
    BrokerSequenceIdZNode.path,
    IsrChangeNotificationZNode.path,
    ProducerIdBlockZNode.path,
    LogDirEventNotificationZNode.path,
    ConfigEntityTypeZNode.path("topics"),
    ConfigEntityTypeZNode.path("clients"),
    ConfigEntityTypeZNode.path("users"),
    ConfigEntityTypeZNode.path("brokers"),
    ConfigEntityTypeZNode.path("ips"),
)
