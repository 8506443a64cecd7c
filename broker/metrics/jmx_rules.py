"""Kafka MBean names -> Prometheus names, as the Prometheus JMX exporter's common Kafka rules
make them (its example ``kafka-2_0_0.yml`` rule set, also the base of Strimzi's and
Confluent's), so Grafana dashboards written for a JMX-exported Kafka read Josef unchanged.

The exporter turns each MBean attribute into the string ``domain<k1=v1, k2=v2><>Attribute``
(key properties in the MBean's own order) and applies the first rule whose pattern matches;
``$n`` in a name or label is the n-th group; names are lower-cased (``lowercaseOutputName``),
label names and values are not. The rules, in the exporter's order:

=============================================================  =================================
pattern                                                        Prometheus sample
=============================================================  =================================
``kafka.server<type=T, name=N, clientId=C, topic=t,``          ``kafka_server_T_N{clientId, topic,
``partition=p><>Value``                                        partition}`` (gauge)
``kafka.server<type=T, name=N, clientId=C, brokerHost=H,``     ``kafka_server_T_N{clientId,
``brokerPort=P><>Value``                                       broker="H:P"}`` (gauge)
``kafka.coordinator.D<type=T, name=N><>Value``                 ``kafka_coordinator_D_T_N``
``kafka.D<type=T, name=XPerSec..., k=v[, k2=v2]><>Count``      ``kafka_D_T_X_total{k, k2}``
                                                               (counter; 0-2 extra keys)
``kafka.D<type=T, name=N[, k=v[, k2=v2]]><>Value``             ``kafka_D_T_N{k, k2}`` (gauge)
``kafka.D<type=T, name=N[, k=v[, k2=v2]]><>Count``             ``kafka_D_T_N_count{k, k2}``
``kafka.D<type=T, name=N[, k=v[, k2=v2]]><>NNthPercentile``    ``kafka_D_T_N{k, k2,
                                                               quantile="0.NN"}``
``kafka.D<type=T, name=NPercent...><>MeanRate`` / ``Value``    ``kafka_D_T_N_percent``
=============================================================  =================================

(``D`` is one word: ``kafka.server``, ``kafka.network``, ``kafka.log``, ``kafka.controller``,
``kafka.cluster``.) Examples: ``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,
topic=t`` -> ``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``;
``kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce`` 99thPercentile ->
``kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99"}``. The rules
for quota MBeans (``kafka.server<type=Produce, user=...>``) are kept too.

An MBean no rule matches is not exported (as with the exporter). Results are cached per
(MBean, attribute).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["convert", "Converted"]


@dataclass(frozen=True, slots=True)
class Converted:
    name: str
    labels: tuple[tuple[str, str], ...]
    type: str  # "counter" or "gauge"


# (pattern, name template, type, ((label template, value template), ...))
_KV = r"(.+)=(.+)"
_RULES_SRC: list[tuple[str, str, str, tuple[tuple[str, str], ...]]] = [
    (r"kafka.server<type=(.+), name=(.+), clientId=(.+), topic=(.+), partition=(.*)><>Value",
     "kafka_server_$1_$2", "gauge",
     (("clientId", "$3"), ("topic", "$4"), ("partition", "$5"))),
    (r"kafka.server<type=(.+), name=(.+), clientId=(.+), brokerHost=(.+), brokerPort=(.+)><>Value",
     "kafka_server_$1_$2", "gauge", (("clientId", "$3"), ("broker", "$4:$5"))),
    (r"kafka.coordinator.(\w+)<type=(.+), name=(.+)><>Value",
     "kafka_coordinator_$1_$2_$3", "gauge", ()),
    # per-second meters, 0-2 extra keys
    (rf"kafka.(\w+)<type=(.+), name=(.+)PerSec\w*, {_KV}, {_KV}><>Count",
     "kafka_$1_$2_$3_total", "counter", (("$4", "$5"), ("$6", "$7"))),
    (rf"kafka.(\w+)<type=(.+), name=(.+)PerSec\w*, {_KV}><>Count",
     "kafka_$1_$2_$3_total", "counter", (("$4", "$5"),)),
    (r"kafka.(\w+)<type=(.+), name=(.+)PerSec\w*><>Count",
     "kafka_$1_$2_$3_total", "counter", ()),
    # quotas
    (r"kafka.server<type=(.+), user=(.+), client-id=(.+)><>([a-z-]+)",
     "kafka_server_quota_$4", "gauge", (("resource", "$1"), ("user", "$2"), ("clientId", "$3"))),
    (r"kafka.server<type=(.+), client-id=(.+)><>([a-z-]+)",
     "kafka_server_quota_$3", "gauge", (("resource", "$1"), ("clientId", "$2"))),
    (r"kafka.server<type=(.+), user=(.+)><>([a-z-]+)",
     "kafka_server_quota_$3", "gauge", (("resource", "$1"), ("user", "$2"))),
    # gauges, 0-2 extra keys
    (rf"kafka.(\w+)<type=(.+), name=(.+), {_KV}, {_KV}><>Value",
     "kafka_$1_$2_$3", "gauge", (("$4", "$5"), ("$6", "$7"))),
    (rf"kafka.(\w+)<type=(.+), name=(.+), {_KV}><>Value",
     "kafka_$1_$2_$3", "gauge", (("$4", "$5"),)),
    (r"kafka.(\w+)<type=(.+), name=(.+)><>Value", "kafka_$1_$2_$3", "gauge", ()),
    # histograms as summaries (count + percentiles)
    (rf"kafka.(\w+)<type=(.+), name=(.+), {_KV}, {_KV}><>Count",
     "kafka_$1_$2_$3_count", "counter", (("$4", "$5"), ("$6", "$7"))),
    (r"kafka.(\w+)<type=(.+), name=(.+), (.+)=(.*), (.+)=(.+)><>(\d+)thPercentile",
     "kafka_$1_$2_$3", "gauge", (("$4", "$5"), ("$6", "$7"), ("quantile", "0.$8"))),
    (rf"kafka.(\w+)<type=(.+), name=(.+), {_KV}><>Count",
     "kafka_$1_$2_$3_count", "counter", (("$4", "$5"),)),
    (r"kafka.(\w+)<type=(.+), name=(.+), (.+)=(.*)><>(\d+)thPercentile",
     "kafka_$1_$2_$3", "gauge", (("$4", "$5"), ("quantile", "0.$6"))),
    (r"kafka.(\w+)<type=(.+), name=(.+)><>Count", "kafka_$1_$2_$3_count", "counter", ()),
    (r"kafka.(\w+)<type=(.+), name=(.+)><>(\d+)thPercentile",
     "kafka_$1_$2_$3", "gauge", (("quantile", "0.$4"),)),
    # percent meters/gauges
    (r"kafka.(\w+)<type=(.+), name=(.+)Percent\w*><>MeanRate",
     "kafka_$1_$2_$3_percent", "gauge", ()),
    (r"kafka.(\w+)<type=(.+), name=(.+)Percent\w*><>Value",
     "kafka_$1_$2_$3_percent", "gauge", ()),
    (rf"kafka.(\w+)<type=(.+), name=(.+)Percent\w*, {_KV}><>Value",
     "kafka_$1_$2_$3_percent", "gauge", (("$4", "$5"),)),
]
_RULES = [(re.compile(p), n, t, lbl) for p, n, t, lbl in _RULES_SRC]
_GROUP = re.compile(r"\$(\d+)")
_UNSAFE = re.compile(r"[^a-zA-Z0-9:_]")
_UNDERSCORES = re.compile(r"__+")
_cache: dict[tuple[str, str], Converted | None] = {}
_CACHE_MAX = 500_000


def _subst(template: str, m: re.Match) -> str:
    return _GROUP.sub(lambda g: m.group(int(g.group(1))) or "", template)


def _safe_name(name: str) -> str:
    # the exporter's safeName: invalid characters -> "_", runs of "_" collapsed
    return _UNDERSCORES.sub("_", _UNSAFE.sub("_", name))


def exporter_input(mbean: str, attribute: str) -> str:
    """The string the exporter matches: ``domain<k1=v1, k2=v2><>Attribute``."""
    domain, _, props = mbean.partition(":")
    return f"{domain}<{', '.join(props.split(','))}><>{attribute}"


def convert(mbean: str, attribute: str) -> Converted | None:
    """The Prometheus name, labels and type the rules give one MBean attribute, or None."""
    key = (mbean, attribute)
    hit = _cache.get(key, False)
    if hit is not False:
        return hit  # type: ignore[return-value]
    text = exporter_input(mbean, attribute)
    out = None
    for rx, name_t, typ, labels_t in _RULES:
        m = rx.fullmatch(text)
        if m is None:
            continue
        name = _safe_name(_subst(name_t, m)).lower()
        labels = tuple((_safe_name(_subst(k, m)), _subst(v, m)) for k, v in labels_t)
        out = Converted(name, labels, typ)
        break
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    _cache[key] = out
    return out
