"""The console's pure logic: message filters and JSON paths, broker states (manual clock),
the login file and password checks, the navigation's slots."""

from __future__ import annotations

import base64
from types import SimpleNamespace as NS

import pytest

from console import rendering
from console.auth import AuthFileError, BasicAuth, hash_password, load_users
from console.browse import Filters, json_field
from console.service import BrokerTracker


def _rec(key=b"k", value=b"v", headers=()):
    return {"key": key, "value": value, "headers": list(headers)}


def test_json_field_paths():
    doc = b'{"customer": {"id": 7, "tags": ["a", "b"]}, "ok": true}'
    assert json_field(doc, "customer.id") == (True, 7)
    assert json_field(doc, "$.customer.tags[1]") == (True, "b")
    assert json_field(doc, "customer.tags[5]") == (False, None)
    assert json_field(doc, "missing") == (False, None)
    assert json_field(b"not json", "a") == (False, None)
    assert json_field(None, "a") == (False, None)


def test_filters_combine():
    r = _rec(b"order-1", b'{"tier": "gold", "n": 3}', [("source", b"web")])
    assert Filters(key="order").match(r) and not Filters(key="ORDER").match(r)
    assert Filters(value='"gold"').match(r)
    assert Filters(header="source=web").match(r) and Filters(header="source").match(r)
    assert not Filters(header="source=batch").match(r)
    assert Filters(json_path="tier", json_value="gold").match(r)
    assert Filters(json_path="n", json_value="3").match(r)
    assert Filters(json_path="n").match(r) and not Filters(json_path="m").match(r)
    assert not Filters(key="order", json_path="tier", json_value="silver").match(r)
    assert Filters(value="x").match(_rec(value=None)) is False
    assert not Filters().active and Filters(header="h").active


def _md(brokers, replicas=(), controller=1):
    return NS(brokers=[NS(node_id=b, host="h", port=9000 + b, rack=None) for b in brokers],
              topics=[NS(partitions=[NS(replica_nodes=list(replicas))])],
              controller_id=controller)


def test_broker_states_with_a_manual_clock():
    now = [100.0]
    t = BrokerTracker(clock=lambda: now[0])
    t.observe(_md([1, 2, 3], replicas=[1, 2, 3, 4]))
    states = {b["id"]: b["state"] for b in t.brokers()}
    assert states == {1: "online", 2: "online", 3: "online", 4: "offline"}  # 4: a replica only
    t.mark_failed(2, "timed out")  # one slow answer: still online, with the reason
    assert t.state(2) == ("online", "last request failed: timed out")
    now[0] += 31
    assert t.state(2)[0] == "offline"  # not answering for 30 s
    t.mark_ok(2)
    assert t.state(2) == ("online", "")
    t.mark_failed(3, "cannot connect to h:9003: Connection refused")
    assert t.state(3)[0] == "offline"  # refused: the process is gone
    t.set_metric_state(1, 6)
    assert t.state(1) == ("controlled shutdown", "pending controlled shutdown")
    now[0] += 60
    assert t.state(1) == ("online", "")  # a stale metric is not believed
    t.observe(_md([1, 3]))
    assert t.state(2) == ("offline", "not registered in the cluster")
    assert [b["id"] for b in t.brokers()] == [1, 2, 3, 4]
    assert t.addresses() == [("h", 9001), ("h", 9002), ("h", 9003)]


def test_login_file_and_passwords(tmp_path):
    f = tmp_path / "users"
    f.write_text(f"# comment\n\nalice:plain$secret\nbob:{hash_password('pw', 1000)}\n")
    users = load_users(str(f))
    auth = BasicAuth(users)

    def header(user, pw):
        return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()

    assert auth.user(header("alice", "secret")) == "alice"
    assert auth.user(header("bob", "pw")) == "bob"
    assert auth.user(header("bob", "pw")) == "bob"  # from the cache
    assert auth.user(header("bob", "PW")) is None
    assert auth.user(header("carol", "pw")) is None
    assert auth.user("Basic !!!") is None and auth.user(None) is None
    f.write_text("alice:md5$abc\n")
    with pytest.raises(AuthFileError, match="line 1"):
        load_users(str(f))
    with pytest.raises(AuthFileError, match="cannot read"):
        load_users(str(tmp_path / "absent"))


def test_sections_leave_room_for_more_pages(monkeypatch):
    monkeypatch.setattr(rendering, "SECTIONS", list(rendering.SECTIONS))
    rendering.add_section("/share-groups", "Share groups", after="/groups")
    paths = [p for p, _ in rendering.SECTIONS]
    assert paths[paths.index("/groups") + 1] == "/share-groups"
    assert rendering._section_of("/share-groups/g1") == "/share-groups"
    assert rendering._section_of("/brokers/3") == "/"
    assert rendering.format_value(b"\x00a", "text") == "\\x00a"
