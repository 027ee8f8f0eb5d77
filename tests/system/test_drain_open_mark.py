"""A drain killed part way stays open on its target across the target's kill -9 (the target's
``migrating_from`` and ``GET /api/v1/migrations`` still name the drained node), until the
drain is run again to the end, or an operator gives it up (``DELETE /api/v1/migrations/<node>``),
which a later kill -9 does not undo either."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from petrel.client import Connection, Message
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system

QUEUE = "om.q"
COUNT = 3000
# large messages (each its own FORWARD) and a small duplicate-ID cache: the drainer moves them in
# many rounds and can be caught part way
SOURCE = "id_cache_size = 200\nmin_large_message_size = 2048\n"


@pytest.fixture
def target(tmp_path):
    """The drain's target, with its management API; killed at the end."""
    b = BrokerProcess(tmp_path / "dst", name="dst", http=True)
    yield b
    if b.proc is not None and b.proc.poll() is None:
        b.kill9()


def drain_command(source: BrokerProcess, url: str) -> list[str]:
    return [sys.executable, "-m", "petrel", "drain", "--data-dir", str(source.data_dir), "--target", url,
            "--progress", "json"]


def api(broker: BrokerProcess, method: str, path: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}{path}", method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def count(url: str) -> int:
    with Connection(url) as conn:
        return conn.queue_info(QUEUE)["message_count"]


def migrating(url: str) -> list[str]:
    with Connection(url) as conn:
        return conn.queue_info(QUEUE)["migrating_from"]


def filled_and_killed(broker_factory) -> tuple[BrokerProcess, str]:
    """A broker holding COUNT large messages on QUEUE, killed (kill -9); it and its node id."""
    src = broker_factory(SOURCE, "src").start()
    with Connection(f"tcp://127.0.0.1:{src.port}") as conn:
        node = conn.node_id
        conn.create_queue(QUEUE)
        with conn.session() as session:
            producer = session.producer(f"queue://{QUEUE}")
            for i in range(COUNT):
                producer.send(Message(f"{i}|".encode().ljust(4096, b"x"), durable=True))
            session.flush()
    src.kill9()
    return src, node


def drain_part_way(src: BrokerProcess, url: str) -> int:
    """The drainer, killed (SIGKILL) once the target holds some of the messages; how many it held."""
    proc = subprocess.Popen(drain_command(src, url), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if count(url) > 0:
                    break
            except Exception:  # noqa: BLE001 - the queue is not there yet
                pass
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    moved = count(url)
    if not 0 < moved < COUNT:
        pytest.skip(f"the drainer was not caught part way ({moved} of {COUNT} moved)")
    return moved


def part_way_drained(broker_factory, dst: BrokerProcess) -> tuple[BrokerProcess, str, str]:
    """A killed broker's directory drained part way to `dst` (started): the source, its node id
    and the target's URL."""
    src, node = filled_and_killed(broker_factory)
    dst.start()
    url = f"tcp://127.0.0.1:{dst.port}"
    drain_part_way(src, url)
    return src, node, url


def test_an_unfinished_drain_survives_the_target_kill_9_until_it_is_run_to_the_end(broker_factory, target):
    dst = target
    src, node, url = part_way_drained(broker_factory, dst)
    assert migrating(url) == [node]
    dst.kill9()
    dst.start()
    assert migrating(url) == [node], "the restarted target forgot the unfinished drain"
    assert api(dst, "GET", "/api/v1/migrations")[1]["open"] == [node]
    done = subprocess.run(drain_command(src, url), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert migrating(url) == [] and count(url) == COUNT
    dst.kill9()
    dst.start()
    assert migrating(url) == [] and api(dst, "GET", "/api/v1/migrations")[1] == {
        "node_id": api(dst, "GET", "/api/v1/migrations")[1]["node_id"], "open": [], "count": 0}
    printed = subprocess.run([sys.executable, "-m", "petrel", "data", "print", str(dst.data_dir)],
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0 and "not finished" not in printed.stdout


def test_an_operator_gives_up_an_origin_that_never_comes_back(broker_factory, target):
    dst = target
    _, node, url = part_way_drained(broker_factory, dst)
    dst.kill9()
    printed = subprocess.run([sys.executable, "-m", "petrel", "data", "print", str(dst.data_dir)],
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0 and f"not finished, from: {node}" in " ".join(printed.stdout.split()), \
        printed.stdout
    dst.start()
    assert api(dst, "DELETE", "/api/v1/migrations/no-such-node")[0] == 404
    status, body = api(dst, "DELETE", f"/api/v1/migrations/{node}")
    assert (status, body["closed"]) == (200, node)
    assert migrating(url) == []
    dst.kill9()
    dst.start()
    assert migrating(url) == [] and api(dst, "GET", "/api/v1/migrations")[1]["open"] == []
