"""Browsing a paging queue (issue 15): 30,000 small messages in a queue whose address pages
(max_size_bytes 64 KiB, so nearly all of them are in page files) are all shown, in order, to
an OpenWire QueueBrowser (ActiveMQ Classic's JMS client), to `petrel browser` (CORE) and
through the management API's browse, and none is consumed. `petrel.core.browsing.QueueBrowse` streams the page files a chunk at a time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request

import pytest

from jms import compile_program, run
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system

N = 30_000
SETTINGS = '[address_settings."paged.#"]\nmax_size_bytes = 65536\n'


def get(b: BrokerProcess, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{b.http_port}{path}", timeout=10) as resp:
        return json.loads(resp.read())


def queue_stat(b: BrokerProcess, name: str) -> dict:
    return get(b, f"/api/v1/queues/{name}")


def test_openwire_and_core_browsers_see_every_paged_message_in_order(tmp_path):
    classpath = compile_program("JmsBrowse", tmp_path / "classes")
    broker = BrokerProcess(tmp_path / "b", settings=SETTINGS, http=True).start()
    try:
        url = f"tcp://127.0.0.1:{broker.port}"
        # (async sends: fast, and the browse may find the last records still on their way to the
        # page files. Not transacted: a transaction's sends are not paged.)
        lines = run(classpath, "JmsBrowse", url + "?jms.useAsyncSend=true", "paged.browse", str(N), "0", "keep",
                    timeout=600)
        assert lines == [f"BROWSED {N}", "ORDERED true", "SELECTED 3"]
        stat = queue_stat(broker, "paged.browse")
        assert stat["message_count"] == N, stat  # browsing consumed nothing
        paged = sum(f.stat().st_size for f in (broker.data_dir / "paging").rglob("*") if f.is_file())
        assert paged > N * 50, paged  # most of the messages are in page files, not in memory

        out = subprocess.run([sys.executable, "-m", "petrel", "browser", "--url", url, "--destination",
                              "queue://paged.browse", "--body-size", "0"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        index = [int(i) for i in re.findall(r"\bindex=(\d+)", out.stdout)]
        assert f"Browsed: {N} messages" in out.stdout, out.stdout[-500:]
        assert index == list(range(N))
        # the management API's browse pages through the paged messages too
        page = get(broker, "/api/v1/queues/paged.browse/messages?offset=25000&limit=5&body=none")
        assert [m["properties"]["index"] for m in page["messages"]] == list(range(25000, 25005)) and page["more"]
        last = get(broker, f"/api/v1/queues/paged.browse/messages?offset={N - 2}&limit=5&body=none")
        assert [m["properties"]["index"] for m in last["messages"]] == [N - 2, N - 1] and not last["more"]
        assert queue_stat(broker, "paged.browse")["message_count"] == N
    finally:
        broker.stop()


def test_a_prefetch_0_browser_pulls_every_paged_message(tmp_path):
    """With prefetch 0 each message of the browse comes for a MessagePull, from the page files too."""
    classpath = compile_program("JmsBrowse", tmp_path / "classes")
    broker = BrokerProcess(tmp_path / "b", settings=SETTINGS).start()
    try:
        url = f"tcp://127.0.0.1:{broker.port}?jms.useAsyncSend=true&jms.prefetchPolicy.all=0"
        lines = run(classpath, "JmsBrowse", url, "paged.pulled", "3000", "0", "keep", timeout=600)
        assert lines == ["BROWSED 3000", "ORDERED true", "SELECTED 3"]
        assert any((broker.data_dir / "paging").rglob("*.page"))  # (still paging: nothing was consumed)
    finally:
        broker.stop()

