"""The broker's ZooKeeper identity for ``zookeeper.set.acl`` (Kafka's JAAS ``Client`` section).

Kafka's broker logs in to ZooKeeper with the JAAS file named by the JVM system property
``java.security.auth.login.config`` (passed in ``KAFKA_OPTS``), section
``zookeeper.sasl.clientconfig`` (default ``Client``)::

    Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka" password="kafka-secret";
    };

Josef reads the same file and section from ``KAFKA_OPTS`` (``-Dkey=value`` words) and
authenticates its ZooKeeper session with that username and password through ZooKeeper's
built-in ``digest`` scheme (kazoo's ``add_auth``), so with ``zookeeper.set.acl=true`` the
znodes it creates carry ``CREATOR_ALL`` for that identity plus world ``READ`` (Kafka's
``ZkData.defaultAcls``). SASL (DIGEST-MD5/GSSAPI) authentication to ZooKeeper itself is not
supported: the identity in the ACLs is ``digest:<username>:<hash>`` instead of
``sasl:<username>``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

__all__ = ["ZkAuthError", "zookeeper_auth_data"]


class ZkAuthError(ValueError):
    """The JAAS file or section cannot be used (the message says why)."""


def _system_properties(environ: Mapping[str, str]) -> dict[str, str]:
    props = {}
    for word in shlex.split(environ.get("KAFKA_OPTS", "")):
        if word.startswith("-D") and "=" in word:
            key, _, value = word[2:].partition("=")
            props[key] = value
    return props


def zookeeper_auth_data(environ: Mapping[str, str]) -> list[tuple[str, str]] | None:
    """``[("digest", "user:password")]`` from the JAAS ``Client`` section, or None when no
    JAAS file is configured. ZkAuthError for an unreadable file, a missing section or a
    section without username/password."""
    props = _system_properties(environ)
    path = props.get("java.security.auth.login.config")
    if not path:
        return None
    section = props.get("zookeeper.sasl.clientconfig", "Client")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ZkAuthError(f"cannot read the JAAS file {path}: {e.strerror}") from None
    m = re.search(r"(?:^|[\s;}])" + re.escape(section) + r"\s*\{(.*?)\}\s*;", text, re.S)
    if m is None:
        return None
    from common.security.jaas import JaasConfigError, parse_jaas_config

    try:
        entries = parse_jaas_config(m.group(1))
    except JaasConfigError as e:
        raise ZkAuthError(f"JAAS section {section} of {path}: {e}") from None
    options = entries[0].options if entries else {}
    user, password = options.get("username"), options.get("password")
    if not user or password is None:
        raise ZkAuthError(f"JAAS section {section} of {path} has no username/password")
    return [("digest", f"{user}:{password}")]
