"""The web console (``josef console``) driven in Debian's headless Chromium through Selenium.

One broker (with its Prometheus endpoint), one console with ``--allow-writes`` and one browser
serve the whole module; a second, read-only console points at a port nobody listens on. A
topic is created in the browser, records are produced with confluent-kafka and found in the
message browser (text, JSON, hex); a record whose value is ``<script>`` renders as text and
runs nothing; a group's lag, shown on its page, goes to 0 once it has consumed and committed;
the live charts draw from the broker metrics; the unreachable cluster shows a banner; a
read-only console refuses writes. Screenshots of the main pages go to
``$JOSEF_SCREENSHOT_DIR`` (``docs/screenshots`` holds a committed set) or the test's tmp dir.
"""

from __future__ import annotations

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

from tests.integration.harness import REPO_ROOT, BrokerProcess, free_port, require_tool

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CONSOLE_RE = re.compile(r"on http://127\.0\.0\.1:(\d+)/")
TOPIC = "console-orders"
XSS = "<script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 2\">"


class ConsoleProcess:
    def __init__(self, bootstrap: str, directory: Path, *extra: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        self.log = directory / "console.log"
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


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    chromium = require_tool("chromium")
    driver_path = require_tool("chromedriver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    d = tmp_path_factory.mktemp("console")
    shots = Path(os.environ.get("JOSEF_SCREENSHOT_DIR") or d / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(d / "broker", {
        "prometheus.listener": f"http://127.0.0.1:{free_port()}", "num.partitions": "1"})
    consoles: list[ConsoleProcess] = []
    browser = None
    try:
        broker.start()
        consoles.append(ConsoleProcess(broker.bootstrap, d, "--allow-writes"))
        dead = f"127.0.0.1:{free_port()}"
        consoles.append(ConsoleProcess(dead, d / "broker"))
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
        yield {"broker": broker, "console": consoles[0], "dead": consoles[1],
               "dead_bootstrap": dead, "browser": browser, "shots": shots}
    finally:
        if browser is not None:
            browser.quit()
        for c in consoles:
            c.stop()
        broker.stop()


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


def test_overview_and_broker_pages(env):
    from selenium.webdriver.common.by import By

    b, console = env["browser"], env["console"]
    b.get(console.url + "/")
    assert b.title.startswith("Cluster")
    rows = b.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")
    assert len(rows) == 1 and "controller" in rows[0].text
    assert not b.find_elements(By.ID, "banner")
    rows[0].find_element(By.CSS_SELECTOR, "a").click()
    wait_for(lambda: "Broker" in b.title, what="the broker page")
    assert "controller" in text_of(b, "h1")
    assert b.find_elements(By.CSS_SELECTOR, "#log-dirs tbody tr")
    # the broker publishes prometheus.listener: its charts fill from its metrics
    wait_for(lambda: (b.refresh() or True) and b.find_elements(
        By.CSS_SELECTOR, ".chart svg polyline"), timeout=40, what="a broker metrics chart")
    b.save_screenshot(str(env["shots"] / "broker.png"))
    b.get(console.url + "/")
    wait_for(lambda: b.find_elements(By.CSS_SELECTOR, ".chart svg polyline"), timeout=20,
             what="the throughput chart")
    b.save_screenshot(str(env["shots"] / "overview.png"))


def test_create_topic_produce_and_browse(env):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    b, console, broker = env["browser"], env["console"], env["broker"]
    b.get(console.url + "/topics")
    form = b.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys(TOPIC)
    parts = form.find_element(By.NAME, "partitions")
    parts.clear()
    parts.send_keys("2")
    form.find_element(By.NAME, "configs").send_keys("retention.ms=86400000")
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait_for(lambda: text_of(b, "#topic-name") == TOPIC, what="the new topic's page")
    assert len(b.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 2
    assert "retention.ms" in text_of(b, "table.configs")

    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(8):
        p.produce(TOPIC, partition=0, key=f"order-{i}", value=f"plain value {i}")
    p.produce(TOPIC, partition=0, key="json", value='{"id": 7, "items": ["a", "b"]}')
    p.produce(TOPIC, partition=0, key="evil", value=XSS, headers={"h<b>": b"<i>x</i>"})
    assert p.flush(30) == 0

    b.get(f"{console.url}/topics/{TOPIC}/messages?partition=0")
    rows = wait_for(lambda: b.find_elements(By.CSS_SELECTOR, "#records tbody tr"),
                    what="records")
    assert len(rows) == 10
    values = [r.find_element(By.CSS_SELECTOR, "pre.value").text for r in rows]
    assert values[0] == "plain value 0" and values[9] == XSS  # shown as text
    assert b.execute_script("return window.__xss === undefined")
    assert not b.find_elements(By.CSS_SELECTOR, "#records script, #records img")
    assert "h<b>" in rows[9].text and "<i>x</i>" in rows[9].text
    b.save_screenshot(str(env["shots"] / "messages.png"))

    Select(b.find_element(By.NAME, "format")).select_by_value("json")
    b.find_element(By.CSS_SELECTOR, "#browse-form button").click()
    wait_for(lambda: "format=json" in b.current_url, what="the JSON view")
    json_value = b.find_elements(By.CSS_SELECTOR, "#records pre.value")[8].text
    assert json_value.splitlines()[0] == "{" and '"id": 7,' in json_value

    b.get(f"{console.url}/topics/{TOPIC}/messages?partition=0&offset=9&format=hex")
    rows = b.find_elements(By.CSS_SELECTOR, "#records tbody tr")
    assert len(rows) == 1
    assert rows[0].find_element(By.CSS_SELECTOR, "pre.value").text.startswith(
        "00000000  3c 73 63 72 69 70 74 3e")

    # by timestamp: everything was produced after this test started
    b.get(f"{console.url}/topics/{TOPIC}/messages?partition=0&timestamp=0&limit=3")
    assert [r.text.split()[0] for r in b.find_elements(
        By.CSS_SELECTOR, "#records tbody tr")] == ["0", "1", "2"]

    b.get(f"{console.url}/topics/{TOPIC}")
    ends = [r.find_elements(By.TAG_NAME, "td")[5].text
            for r in b.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")]
    assert ends == ["10", "0"]
    b.save_screenshot(str(env["shots"] / "topic.png"))
    b.get(console.url + "/topics")
    assert TOPIC in text_of(b, "#topics")
    b.save_screenshot(str(env["shots"] / "topics.png"))


def test_group_lag_goes_to_zero(env):
    from selenium.webdriver.common.by import By

    b, console, broker = env["browser"], env["console"], env["broker"]
    topic, group = "console-lag", "console-group"
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        p.produce(topic, value=b"v%d" % i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = []
        while len(got) < 10:
            m = c.poll(1.0)
            if m is not None and not m.error():
                got.append(m)
        c.commit(message=got[9], asynchronous=False)  # 10 consumed: lag 20
        b.get(f"{console.url}/groups/{group}")
        assert text_of(b, "#total-lag") == "20"
        assert text_of(b, "#group-state") == "Stable"
        assert f"{topic}-0" in text_of(b, "#members")
        series = f"{console.url}/api/series?name=group.{group}.lag"

        def sampled(value):
            with urllib.request.urlopen(series, timeout=10) as resp:
                points = json.loads(resp.read())[f"group.{group}.lag"]
            return [v for _, v in points].count(value) >= 2

        wait_for(lambda: sampled(20), what="the lag chart's samples at 20")
        while len(got) < 30:
            m = c.poll(1.0)
            if m is not None and not m.error():
                got.append(m)
        c.commit(asynchronous=False)

        def lag_zero():
            b.refresh()
            return text_of(b, "#total-lag") == "0" and text_of(b, "td.lag") == "0"

        wait_for(lag_zero, what="the group's lag to reach 0")
        wait_for(lambda: sampled(0), what="the lag chart's samples at 0")
        b.refresh()
        wait_for(lambda: b.find_elements(By.CSS_SELECTOR, ".chart svg polyline"),
                 timeout=20, what="the lag chart")
        b.save_screenshot(str(env["shots"] / "group.png"))
        b.get(console.url + "/groups")
        assert group in text_of(b, "#groups")
        b.save_screenshot(str(env["shots"] / "groups.png"))
    finally:
        c.close()


def test_delete_topic(env):
    from selenium.webdriver.common.by import By

    b, console = env["browser"], env["console"]
    b.get(console.url + "/topics")
    form = b.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys("console-doomed")
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait_for(lambda: text_of(b, "#topic-name") == "console-doomed", what="the topic page")
    b.find_element(By.CSS_SELECTOR, "#delete-topic button").click()
    wait_for(lambda: "deleted" in text_of(b, "p.note"), what="the deletion note")
    assert "console-doomed" not in text_of(b, "#topics")


def test_unreachable_cluster_banner_and_read_only(env):
    from selenium.webdriver.common.by import By

    b, dead = env["browser"], env["dead"]
    b.get(dead.url + "/topics")
    banner = text_of(b, "#banner")
    assert "Cannot reach the cluster" in banner and env["dead_bootstrap"] in banner
    assert "Traceback" not in b.page_source
    assert not b.find_elements(By.ID, "create-topic")  # read-only: no form
    b.save_screenshot(str(env["shots"] / "unreachable.png"))
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(dead.url + "/groups/g", timeout=30)
    assert e.value.code == 503
    e.value.close()
    req = urllib.request.Request(dead.url + "/topics", data=b"name=x&partitions=1",
                                 method="POST")
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
