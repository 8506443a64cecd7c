"""The web console (``josef console``) driven in Debian's headless Chromium through Selenium.

A 3-broker ZooKeeper cluster (each broker with its Prometheus endpoint, the ACL authorizer on
with allow.everyone.if.no.acl.found) serves the module; the main console gets two bootstrap
servers (brokers 1 and 2) and ``--allow-writes``; a second, read-only console points at a
port nobody listens on; a third asks for a login. Covered: broker states and charts, a topic
created in the browser, the message browser (text/JSON/hex, an XSS record rendered as text,
filters on key/value/header/JSON field, all partitions, newest first), topic search, sort
and pagination, the live tail receiving a record produced from the form, topic writes
(configs, partitions, delete records), a group's lag and an offset reset, the ACL page
listing an ACL made with ``josef acls``, the SCRAM/quota/transaction/reassignment/log-dir
pages, the unreachable banner, read-only refusals, the login; last, broker 1 (the first
bootstrap server) is SIGKILLed and the pages still load, showing it offline. Screenshots of
every page go to ``$JOSEF_SCREENSHOT_DIR`` (``docs/screenshots`` holds a committed set) or
the test's tmp dir.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.integration.cluster import Cluster
from tests.integration.harness import REPO_ROOT, free_port, require_tool

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CONSOLE_RE = re.compile(r"on http://127\.0\.0\.1:(\d+)/")
TOPIC = "console-orders"
XSS = "<script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 2\">"


class ConsoleProcess:
    def __init__(self, bootstrap: str, directory: Path, *extra: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        directory.mkdir(parents=True, exist_ok=True)
        self.log = directory / f"console-{free_port()}.log"
        self.out = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker.cli", "console", "--bootstrap-server", bootstrap,
             "--listen", "127.0.0.1:0", "--refresh-seconds", "1", "--timeout", "5", *extra],
            stdout=self.out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)
        deadline = time.monotonic() + 30
        m = None
        while m is None and time.monotonic() < deadline and self.proc.poll() is None:
            m = CONSOLE_RE.search(self.log.read_text())
            time.sleep(0.05)
        assert m, self.log.read_text()
        self.url = f"http://127.0.0.1:{int(m.group(1))}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.out.close()


def josef(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True,
                         text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 0, (out.stdout, out.stderr)
    return out.stdout


def create_topics(bootstrap: str, *names: str) -> None:
    """With the Java-style admin client (it sends CreateTopics to the controller)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 2) for n in names]).values():
        f.result(30)


@pytest.fixture(scope="module")
def env(tmp_path_factory, zookeeper):
    chromium = require_tool("chromium")
    driver_path = require_tool("chromedriver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    d = tmp_path_factory.mktemp("console")
    shots = Path(os.environ.get("JOSEF_SCREENSHOT_DIR") or d / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(d / "cluster", zookeeper, 3, props={
        "num.partitions": "1", "default.replication.factor": "2",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true"},
        broker_props={i: {"prometheus.listener": f"http://127.0.0.1:{free_port()}"}
                      for i in (1, 2, 3)})
    consoles: list[ConsoleProcess] = []
    browser = None
    try:
        cluster.start()
        two = f"{cluster.broker(1).bootstrap},{cluster.broker(2).bootstrap}"
        consoles.append(ConsoleProcess(two, d, "--allow-writes"))
        dead = f"127.0.0.1:{free_port()}"
        consoles.append(ConsoleProcess(dead, d))
        users = d / "users.txt"
        users.write_text("# console logins\nalice:plain$wonderland\n")
        consoles.append(ConsoleProcess(two, d, "--allow-writes", "--basic-auth-file",
                                       str(users)))
        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", "--window-size=1280,900",
                     f"--user-data-dir={d / 'chrome-profile'}"):
            opts.add_argument(flag)
        os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium download anything
        browser = webdriver.Chrome(options=opts, service=Service(executable_path=driver_path))
        browser.set_page_load_timeout(30)
        yield {"cluster": cluster, "bootstrap": cluster.bootstrap, "console": consoles[0],
               "dead": consoles[1], "dead_bootstrap": dead, "login": consoles[2],
               "browser": browser, "shots": shots}
    finally:
        if browser is not None:
            browser.quit()
        for c in consoles:
            c.stop()
        cluster.stop(kill=True)


def wait_for(fn, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def text_of(browser, css: str) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, css).text


def rows(browser, css: str) -> list:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, f"{css} tbody tr")


def shot(env, name: str) -> None:
    env["browser"].save_screenshot(str(env["shots"] / f"{name}.png"))


def fill(form, **fields) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    for name, value in fields.items():
        el = form.find_element(By.NAME, name)
        if el.tag_name == "select":
            Select(el).select_by_value(value)
        else:
            el.clear()
            el.send_keys(value)


def submit(browser, form, confirm: bool = False) -> None:
    from selenium.webdriver.common.by import By

    form.find_element(By.CSS_SELECTOR, "button[type=submit], button:not([type])").click()
    if confirm:
        wait_for(lambda: browser.switch_to.alert, what="the confirmation").accept()


def test_overview_brokers_and_charts(env):
    from selenium.webdriver.common.by import By

    b, console = env["browser"], env["console"]
    b.get(console.url + "/")
    assert b.title.startswith("Cluster")
    wait_for(lambda: (b.refresh() or True) and [r.text for r in rows(b, "#brokers")] and all(
        "online" in r.text for r in rows(b, "#brokers")), what="three brokers online")
    assert len(rows(b, "#brokers")) == 3
    assert sum("controller" in r.text for r in rows(b, "#brokers")) == 1
    assert not b.find_elements(By.ID, "banner")
    # every broker publishes prometheus.listener: its charts fill from its metrics
    wait_for(lambda: (b.refresh() or True) and len(b.find_elements(
        By.CSS_SELECTOR, ".chart .uplot")) == 4, timeout=40, what="4 charts drawn")
    legend = text_of(b, ".chart .u-legend")
    assert "time" in legend and "messages in" in legend  # below the plot, not over it
    ticks = b.execute_script("return window.josefCharts.map(function (u) { return "
                             "[u.axes[0]._values, u.axes[1]._values]; })")
    assert any(re.search(r"\d{1,2}:\d\d", str(v))
               for x, _ in ticks for v in x or []), ticks  # a wall-clock time axis
    assert any(str(v).endswith(("msg/s", "B/s")) for _, y in ticks for v in y or []), ticks
    shot(env, "overview")
    rows(b, "#brokers")[0].find_element(By.CSS_SELECTOR, "a").click()
    wait_for(lambda: "Broker" in b.title, what="the broker page")
    assert "online" in text_of(b, "h1")
    assert rows(b, "#log-dirs")
    wait_for(lambda: (b.refresh() or True) and b.find_elements(By.CSS_SELECTOR, ".chart .uplot"),
             timeout=40, what="a broker metrics chart")
    shot(env, "broker")
    b.set_window_size(420, 900)  # the layout follows a phone's width: no horizontal scroll
    try:
        b.get(console.url + "/")
        assert b.execute_script("return document.documentElement.scrollWidth") <= 420
        shot(env, "overview-narrow")
    finally:
        b.set_window_size(1280, 900)


def test_create_topic_produce_and_browse(env):
    from selenium.webdriver.common.by import By

    b, console = env["browser"], env["console"]
    b.get(console.url + "/topics")
    form = b.find_element(By.ID, "create-topic")
    fill(form, name=TOPIC, partitions="2", configs="retention.ms=86400000")
    submit(b, form)
    wait_for(lambda: text_of(b, "#topic-name") == TOPIC, what="the new topic's page")
    assert "created topic" in text_of(b, "#note")
    assert len(rows(b, "#partitions")) == 2
    assert "retention.ms" in text_of(b, "table.configs")

    p = Producer({"bootstrap.servers": env["bootstrap"]})
    for i in range(8):
        p.produce(TOPIC, partition=0, key=f"order-{i}", value=f"plain value {i}",
                  headers={"source": b"web" if i % 2 else b"batch"})
    p.produce(TOPIC, partition=0, key="json", value='{"id": 7, "customer": {"tier": "gold"}}')
    p.produce(TOPIC, partition=0, key="evil", value=XSS, headers={"h<b>": b"<i>x</i>"})
    p.produce(TOPIC, partition=1, key="p1", value='{"id": 8, "customer": {"tier": "gold"}}')
    assert p.flush(30) == 0

    b.get(f"{console.url}/topics/{TOPIC}/messages?partition=0")
    records = wait_for(lambda: rows(b, "#records"), what="records")
    assert len(records) == 10
    values = [r.find_element(By.CSS_SELECTOR, "pre.value").text for r in records]
    assert values[0] == "plain value 0" and values[9] == XSS  # shown as text
    assert b.execute_script("return window.__xss === undefined")
    assert not b.find_elements(By.CSS_SELECTOR, "#records script, #records img")
    assert "h<b>" in records[9].text and "<i>x</i>" in records[9].text
    shot(env, "messages")

    fill(b.find_element(By.ID, "browse-form"), format="json")
    submit(b, b.find_element(By.ID, "browse-form"))
    wait_for(lambda: "format=json" in b.current_url, what="the JSON view")
    json_value = b.find_elements(By.CSS_SELECTOR, "#records pre.value")[8].text
    assert json_value.splitlines()[0] == "{" and '"id": 7,' in json_value

    b.get(f"{console.url}/topics/{TOPIC}/messages?partition=0&offset=9&format=hex")
    assert len(rows(b, "#records")) == 1
    assert text_of(b, "#records pre.value").startswith("00000000  3c 73 63 72 69 70 74 3e")
    b.get(f"{console.url}/topics/{TOPIC}/messages?partition=0&timestamp=0&limit=3")
    assert [r.find_element(By.CSS_SELECTOR, "td.offset").text
            for r in rows(b, "#records")] == ["0", "1", "2"]
    b.get(f"{console.url}/topics/{TOPIC}")
    ends = [r.find_elements(By.TAG_NAME, "td")[5].text for r in rows(b, "#partitions")]
    assert ends == ["10", "1"]
    shot(env, "topic")


def test_message_filters_all_partitions_newest_first(env):
    from selenium.webdriver.common.by import By

    b, url = env["browser"], f"{env['console'].url}/topics/{TOPIC}/messages"

    def shown(query: str) -> list[tuple[str, str, str]]:
        b.get(f"{url}?{query}")
        return [(r.find_elements(By.TAG_NAME, "td")[0].text,
                 r.find_element(By.CSS_SELECTOR, "td.offset").text,
                 r.find_element(By.CSS_SELECTOR, "pre.key").text) for r in rows(b, "#records")]

    assert shown("partition=0&key=order-3") == [("0", "3", "order-3")]
    assert [k for _, _, k in shown("partition=0&value=value+5")] == ["order-5"]
    assert [k for _, _, k in shown("partition=0&header=source%3Dweb")] == [
        "order-1", "order-3", "order-5", "order-7"]
    # a JSON field across all partitions, newest first
    assert shown("partition=all&json_path=customer.tier&json_value=gold&order=newest") == [
        ("1", "0", "p1"), ("0", "8", "json")]
    assert "2 scanned" not in text_of(b, "#summary") and "matching" in text_of(b, "#summary")
    shot(env, "messages-filtered")
    everything = shown("partition=all&order=newest&limit=11")
    assert len(everything) == 11 and everything[0] == ("1", "0", "p1")
    assert everything[1:4] == [("0", "9", "evil"), ("0", "8", "json"), ("0", "7", "order-7")]


def test_topic_search_sort_and_pagination(env):
    from selenium.webdriver.common.by import By

    b, console = env["browser"], env["console"]
    names = [f"srch-{i:02d}" for i in range(12)]
    create_topics(env["bootstrap"], *names)
    b.get(console.url + "/topics")
    fill(b.find_element(By.ID, "topic-search"), q="SRCH-", per_page="10")
    submit(b, b.find_element(By.ID, "topic-search"))
    wait_for(lambda: (b.refresh() or True) and "12 topics" in text_of(b, "#topic-count"),
             what="the search")
    first = [r.find_element(By.TAG_NAME, "a").text for r in rows(b, "#topics")]
    assert first == names[:10]
    b.find_element(By.ID, "next-page").click()
    wait_for(lambda: "page 2 of 2" in text_of(b, "#topic-count"), what="page 2")
    assert [r.find_element(By.TAG_NAME, "a").text for r in rows(b, "#topics")] == names[10:]
    b.find_element(By.CSS_SELECTOR, "th a[data-sort=name]").click()  # name, descending
    wait_for(lambda: "dir=desc" in b.current_url, what="the descending sort")
    assert rows(b, "#topics")[0].find_element(By.TAG_NAME, "a").text == "srch-11"
    shot(env, "topics")


def test_live_tail_shows_a_record_produced_from_the_form(env):
    from selenium.webdriver.common.by import By

    b, console = env["browser"], env["console"]
    b.get(f"{console.url}/topics/{TOPIC}/messages?partition=all&value=tail-me")
    b.find_element(By.ID, "tail-start").click()
    wait_for(lambda: b.find_element(By.ID, "tail-panel").get_attribute("data-live") == "1",
             what="the tail to start")
    form = b.find_element(By.ID, "produce-form")
    fill(form, key="from-form", value="tail-me please", headers="origin=console")
    submit(b, form)
    wait_for(lambda: "produced a record" in text_of(b, "#produce-result"), what="the produce")
    row = wait_for(lambda: rows(b, "#tail"), what="the record in the tail")[0]
    assert "from-form" in row.text and "tail-me please" in row.text
    assert "origin=console" in row.text
    # a record from another client, and one the filter drops
    p = Producer({"bootstrap.servers": env["bootstrap"]})
    p.produce(TOPIC, partition=1, key="other", value="not for the tail")
    p.produce(TOPIC, partition=1, key="kafka", value="tail-me too")
    assert p.flush(30) == 0
    wait_for(lambda: len(rows(b, "#tail")) == 2, what="the second record")
    assert "tail-me too" in rows(b, "#tail")[0].text  # newest first
    shot(env, "messages-tail")
    b.find_element(By.ID, "tail-stop").click()
    log = env["console"].log.read_text()
    assert re.search(rf"write by 127\.0\.0\.1: produce {TOPIC} partition=auto: ok", log), log


def test_topic_config_partitions_and_delete_records(env):
    from selenium.webdriver.common.by import By

    b, console = env["browser"], env["console"]
    b.get(f"{console.url}/topics/{TOPIC}")
    fill(b.find_element(By.ID, "edit-configs"), set="retention.ms=3600000")
    submit(b, b.find_element(By.ID, "edit-configs"))
    wait_for(lambda: "altered configs" in text_of(b, "#note"), what="the config change")
    assert any("retention.ms" in r.text and "3600000" in r.text
               for r in rows(b, "table.configs"))
    fill(b.find_element(By.ID, "add-partitions"), count="3")
    submit(b, b.find_element(By.ID, "add-partitions"))
    wait_for(lambda: "now has 3 partitions" in text_of(b, "#note"), what="the new partition")
    wait_for(lambda: (b.refresh() or True) and len(rows(b, "#partitions")) == 3,
             what="every broker's metadata showing the third partition")
    fill(b.find_element(By.ID, "delete-records"), partition="0", offset="5")
    submit(b, b.find_element(By.ID, "delete-records"), confirm=True)
    wait_for(lambda: "low watermark 5" in text_of(b, "#note"), what="the deletion")
    assert rows(b, "#partitions")[0].find_elements(By.TAG_NAME, "td")[4].text == "5"


def test_group_lag_and_offset_reset(env):
    from selenium.webdriver.common.by import By

    b, console = env["browser"], env["console"]
    topic, group = "console-lag", "console-group"
    p = Producer({"bootstrap.servers": env["bootstrap"]})
    for i in range(30):
        p.produce(topic, value=b"v%d" % i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": env["bootstrap"], "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = []
        while len(got) < 30:
            m = c.poll(1.0)
            if m is not None and not m.error():
                got.append(m)
        c.commit(asynchronous=False)
        b.get(f"{console.url}/groups/{group}")
        assert text_of(b, "#group-state") == "Stable" and text_of(b, "#total-lag") == "0"
        assert f"{topic}-0" in text_of(b, "#members")
        wait_for(lambda: (b.refresh() or True) and b.find_elements(
            By.CSS_SELECTOR, ".chart .uplot"), timeout=20, what="the lag chart")
        shot(env, "group")
        fill(b.find_element(By.ID, "reset-offsets"), mode="earliest")
        submit(b, b.find_element(By.ID, "reset-offsets"), confirm=True)
        wait_for(lambda: "inactive" in text_of(b, "#error"), what="the refusal (Stable)")
    finally:
        c.close()
    b.get(f"{console.url}/groups/{group}")
    wait_for(lambda: (b.refresh() or True) and text_of(b, "#group-state") == "Empty",
             what="the group to empty")
    fill(b.find_element(By.ID, "reset-offsets"), topic=topic, mode="earliest")
    submit(b, b.find_element(By.ID, "reset-offsets"), confirm=True)
    wait_for(lambda: "reset group" in text_of(b, "#note"), what="the reset")
    assert text_of(b, "td.committed") == "0" and text_of(b, "#total-lag") == "30"
    fill(b.find_element(By.ID, "reset-offsets"), mode="offset", value="12")
    submit(b, b.find_element(By.ID, "reset-offsets"), confirm=True)
    wait_for(lambda: text_of(b, "td.committed") == "12", what="the reset to offset 12")
    assert text_of(b, "#total-lag") == "18"
    b.get(console.url + "/groups")
    assert group in text_of(b, "#groups")
    shot(env, "groups")
    assert f"write by 127.0.0.1: reset offsets {group} topic={topic} to=earliest" in \
        env["console"].log.read_text()


def test_share_group_pages(env, tmp_path):
    """A share group (KIP-932) with a dead-letter topic: members, start offsets, records not
    yet acknowledged, the acquired counts from the brokers' metrics, dead-lettered records."""
    from tests.integration.test_share_groups import (
        Worker,
        create_topic,
        produce,
        set_group_configs,
        wait_until,
    )

    b, console, bs = env["browser"], env["console"], env["bootstrap"]
    topic = group = "console-share"
    create_topic(bs, topic, 1, 2)
    set_group_configs(bs, group, share_auto_offset_reset="earliest",
                      **{"errors.deadletterqueue.topic.name": "console-share-dlq"})
    produce(bs, topic, range(20))
    w = Worker(tmp_path, "console", bs, group, topic, "--reject-mod", "10:3")
    try:
        wait_until("consumed", lambda: len(w.got()) >= 20, 60)
        b.get(console.url + "/share-groups")
        assert group in text_of(b, "#share-groups") and "Share groups" in b.page_source
        b.get(f"{console.url}/share-groups/{group}")
        wait_for(lambda: (b.refresh() or True) and text_of(b, "#dead-lettered") == "2",
                 what="two dead letters")
        assert text_of(b, "#group-state") == "Stable" and f"{topic}-0" in text_of(b, "#members")
        assert text_of(b, "td.pending") == "0" and text_of(b, "td.acquired") == "0"
        shot(env, "share-group")
    finally:
        w.kill()


def test_operator_pages(env):
    from selenium.webdriver.common.by import By

    b, console, bs = env["browser"], env["console"], env["bootstrap"]
    josef("acls", "--bootstrap-server", bs, "--add", "--allow-principal", "User:alice",
          "--operation", "Read", "--topic", "console-acl-demo")
    josef("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users",
          "--entity-name", "alice", "--add-config", "SCRAM-SHA-256=[password=secret]")
    josef("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users",
          "--entity-name", "alice", "--add-config", "producer_byte_rate=1048576")
    create_topics(bs, "console-txn-topic")
    p = Producer({"bootstrap.servers": bs, "transactional.id": "console-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("console-txn-topic", value=b"in a transaction")
    p.commit_transaction(30)
    b.get(console.url + "/acls")
    acl = wait_for(lambda: [r.text for r in rows(b, "#acls") if "console-acl-demo" in r.text],
                   what="the ACL")[0]
    assert "User:alice" in acl and "READ" in acl and "ALLOW" in acl
    shot(env, "acls")
    pages = {"/users": ("#users", "alice"), "/quotas": ("#quotas", "producer_byte_rate"),
             "/transactions": ("#transactions", "console-txn"),
             "/reassignments": ("#reassignments", "No reassignment"),
             "/log-dirs": ("#log-dirs", "kafka-logs")}
    for path, (table, expected) in pages.items():
        b.get(console.url + path)
        wait_for(lambda table=table, expected=expected, path=path: (
            b.refresh() or True) and expected in text_of(b, table),
            what=f"{path} ({b.page_source[:600]})")
        assert not b.find_elements(By.ID, "error"), (path, b.page_source[:2000])
        shot(env, path.strip("/"))
    assert len({r.find_element(By.TAG_NAME, "a").text for r in rows(b, "#log-dirs")}) == 3


def test_delete_topic(env):
    from selenium.webdriver.common.by import By

    b, console = env["browser"], env["console"]
    b.get(console.url + "/topics")
    form = b.find_element(By.ID, "create-topic")
    fill(form, name="console-doomed")
    submit(b, form)
    wait_for(lambda: text_of(b, "#topic-name") == "console-doomed", what="the topic page")
    submit(b, b.find_element(By.ID, "delete-topic"), confirm=True)
    wait_for(lambda: "deleted topic" in text_of(b, "#note"), what="the deletion note")
    assert "console-doomed" not in text_of(b, "#topics")


def test_unreachable_cluster_banner_and_read_only(env):
    from selenium.webdriver.common.by import By

    b, dead = env["browser"], env["dead"]
    b.get(dead.url + "/topics")
    banner = text_of(b, "#banner")
    assert "Cannot reach the cluster" in banner and env["dead_bootstrap"] in banner
    assert "Traceback" not in b.page_source
    assert not b.find_elements(By.ID, "create-topic")  # read-only: no form
    shot(env, "unreachable")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(dead.url + "/groups/g", timeout=30)
    assert e.value.code == 503
    e.value.close()
    for path in ("/topics", f"/topics/{TOPIC}/produce", "/groups/g/reset"):
        req = urllib.request.Request(dead.url + path, data=b"name=x&value=v", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        assert e.value.code == 403 and b"--allow-writes" in e.value.read()
        e.value.close()
    # and the writable console refuses a cross-site form post
    req = urllib.request.Request(env["console"].url + "/topics", data=b"name=x",
                                 headers={"Origin": "http://evil.example"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 403
    e.value.close()


def test_login_required_with_basic_auth_file(env):
    login = env["login"]
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(login.url + "/", timeout=30)
    assert e.value.code == 401 and "Basic" in e.value.headers["WWW-Authenticate"]
    e.value.close()
    bad = base64.b64encode(b"alice:wrong").decode()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(
            login.url + "/", headers={"Authorization": f"Basic {bad}"}), timeout=30)
    assert e.value.code == 401
    e.value.close()
    good = {"Authorization": "Basic " + base64.b64encode(b"alice:wonderland").decode()}
    with urllib.request.urlopen(urllib.request.Request(login.url + "/", headers=good),
                                timeout=30) as resp:
        assert resp.status == 200 and b'id="brokers"' in resp.read()
    req = urllib.request.Request(f"{login.url}/topics/{TOPIC}/produce", method="POST",
                                 data=b"key=k&value=by+alice",
                                 headers={**good, "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert json.loads(resp.read())["ok"]
    assert f"write by alice: produce {TOPIC}" in login.log.read_text()


def test_first_bootstrap_broker_killed_pages_load_and_show_it_offline(env):
    """Last: broker 1, the first bootstrap server, is SIGKILLed."""
    from selenium.webdriver.common.by import By

    b, console, cluster = env["browser"], env["console"], env["cluster"]
    cluster.kill(1)

    def broker1_offline():
        b.get(console.url + "/")
        row = b.find_element(By.CSS_SELECTOR, "#brokers tr[data-broker='1']")
        return "offline" in row.text

    wait_for(broker1_offline, timeout=60, what="broker 1 shown offline")
    assert not b.find_elements(By.ID, "banner")
    assert "via 127.0.0.1:" in text_of(b, "header .bootstrap")
    assert cluster.broker(1).bootstrap not in text_of(b, "header .bootstrap").split("via")[1]
    shot(env, "overview-broker-offline")
    for path in ("/topics", f"/topics/{TOPIC}", f"/topics/{TOPIC}/messages?partition=all",
                 "/groups", "/log-dirs", "/brokers/1"):
        b.get(console.url + path)
        assert not b.find_elements(By.ID, "banner"), path
        assert "Cluster unavailable" not in b.title and "Error" not in text_of(b, "h1"), path
    assert "offline" in text_of(b, "h1")  # /brokers/1
