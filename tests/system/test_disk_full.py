"""A full disk: persistent sends fail clearly, /health says not ready, and the broker heals by
itself once space is back; nothing receipted is lost or doubled across a restart.

The data directory lives on a small tmpfs mounted for the test (root only; skipped otherwise),
with a filler file beside it on the same file system to take the space away and give it back.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import connect
from petrel.testing.process import OWN_DISK_LIMIT, BrokerProcess, wait_for

pytestmark = pytest.mark.system

MiB = 1 << 20
BODY = 16 * 1024


@pytest.fixture
def tmpfs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs for the data directory")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def make_broker(tmp_path: Path, mnt: Path, settings: str) -> BrokerProcess:
    b = BrokerProcess(tmp_path / "b", http=True, settings=settings, env=OWN_DISK_LIMIT)
    b.data_dir = mnt / "data"  # the log and config stay off the small file system
    text = b.config_path.read_text().splitlines()
    b.config_path.write_text("\n".join(f'data_dir = "{b.data_dir}"' if line.startswith("data_dir") else line
                                       for line in text) + "\n")
    return b


def health(b: BrokerProcess) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{b.http_port}/health", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def fill(mnt: Path, leave: int) -> Path:
    """A filler file beside the data directory leaving about ``leave`` bytes free."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    filler = mnt / "filler"
    with open(filler, "wb") as f:
        left = max(0, free - leave)
        chunk = b"\xff" * MiB
        while left > 0:
            n = f.write(chunk[:min(left, MiB)])
            left -= n
    return filler


def body(i: int) -> str:
    return f"msg-{i:06d}-" + "x" * BODY


def send_until_error(b: BrokerProcess, start: int, window: int = 16, limit: int = 100_000):
    """Pipelined persistent sends with receipts until the broker refuses; (receipted ids, ERROR frame)."""
    conn, listener = connect(b)
    receipted: list[int] = []
    i = start
    try:
        while i < start + limit:
            batch = list(range(i, i + window))
            try:
                for n in batch:
                    conn.send("/queue/full", body(n), headers={"persistent": "true", "receipt": str(n)})
            except Exception:  # the broker closed the connection after its ERROR: read that
                wait_for(lambda: not listener.errors.empty(), 30, message="connection closed without an ERROR")
            i += window
            got = 0
            deadline = time.monotonic() + 60
            while got < window:
                if not listener.errors.empty():
                    while not listener.receipts.empty():
                        receipted.append(int(listener.receipts.get()))
                    return receipted, listener.errors.get()
                try:
                    receipted.append(int(listener.receipts.get(timeout=0.2)))
                    got += 1
                except Exception:
                    assert time.monotonic() < deadline, "neither receipts nor an ERROR: the broker hangs"
    finally:
        try:
            conn.disconnect()
        except Exception:
            pass
    raise AssertionError("the disk never filled")


def send_all(b: BrokerProcess, ids: list[int]) -> None:
    conn, listener = connect(b)
    for n in ids:
        conn.send("/queue/full", body(n), headers={"persistent": "true", "receipt": str(n)})
    got = {int(listener.receipts.get(timeout=60)) for _ in ids}
    assert got == set(ids) and listener.errors.empty()
    conn.disconnect()


def drain(b: BrokerProcess) -> list[int]:
    conn, listener = connect(b)
    conn.subscribe("/queue/full", id="1", ack="auto")
    got = [int(f.body[4:10]) for f in listener.drain(idle=3.0)]
    conn.disconnect()
    return got


def test_full_disk_fails_sends_clearly_then_heals_without_a_restart(tmp_path, tmpfs):
    b = make_broker(tmp_path, tmpfs, "max_disk_usage = 100\njournal_file_size = 1048576\n"
                                     "journal_pool_files = 1\n")
    b.start()
    try:
        wait_for(lambda: health(b)[0] == 200, 60)
        filler = fill(tmpfs, 4 * MiB)
        receipted, error = send_until_error(b, 0)
        assert receipted, "nothing was receipted before the disk filled"
        text = error.headers.get("message", "") + error.body
        assert "No space left" in text or "Errno 28" in text, text
        status, body_ = health(b)
        assert status == 503 and body_["ready"] is False, body_
        assert "No space left" in body_.get("reason", "") or "Errno 28" in body_.get("reason", ""), body_

        filler.unlink()  # space is back: the broker must heal by itself
        wait_for(lambda: health(b)[0] == 200, 60, message=f"/health never ready again: {health(b)}")
        more = list(range(500_000, 500_100))
        send_all(b, more)

        assert b.stop() == 0
        assert b.log().count("cannot write") >= 1
        b.start()
        got = drain(b)
        assert len(got) == len(set(got)), "a message came back twice"
        missing = (set(receipted) | set(more)) - set(got)
        assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
    finally:
        b.kill9()


def test_a_fast_producer_is_blocked_before_the_disk_fills(tmp_path, tmpfs):
    """The disk is checked on the write path: a producer pipelining as fast as it can is held
    when max_disk_usage is crossed, long before the 5 s timer looks, and no write ever fails."""
    b = make_broker(tmp_path, tmpfs, "max_disk_usage = 70\ndisk_scan_period = 60000\n"
                                     "journal_file_size = 1048576\njournal_pool_files = 1\n")
    b.start()
    try:
        wait_for(lambda: health(b)[0] == 200, 60)
        st = os.statvfs(tmpfs)
        total = st.f_blocks * st.f_frsize
        filler = fill(tmpfs, int(total * 0.45))  # ~55% used: 15% of the disk left before the limit
        conn, listener = connect(b)
        count = (total // BODY) // 2  # half the disk: more than there is room for
        sender = threading.Thread(target=lambda: [
            conn.send("/queue/full", body(n), headers={"persistent": "true", "receipt": str(n)})
            for n in range(count)], daemon=True)
        sender.start()
        wait_for(lambda: health(b)[0] == 503, 60, message="/health never said the disk is full")
        assert "max_disk_usage" in health(b)[1].get("reason", "")
        assert listener.errors.empty(), listener.errors.queue[0].body
        filler.unlink()
        sender.join(30)  # well before the 60 s disk_scan_period: the broker looks every 0.5 s while full
        assert not sender.is_alive(), "the producer stayed blocked after space came back"
        got = set()
        deadline = time.monotonic() + 120
        while len(got) < count and time.monotonic() < deadline:
            got.add(int(listener.receipts.get(timeout=60)))
        assert len(got) == count and listener.errors.empty()
        conn.disconnect()
        assert "cannot write" not in b.log()
        assert health(b)[0] == 200
    finally:
        b.kill9()


def test_core_producer_on_a_full_disk_gets_an_error_naming_the_cause(tmp_path, tmpfs):
    from petrel.client import ClientError, connect as core_connect

    b = make_broker(tmp_path, tmpfs, "max_disk_usage = 100\njournal_file_size = 1048576\n"
                                     "journal_pool_files = 1\n")
    b.start()
    try:
        wait_for(lambda: health(b)[0] == 200, 60)
        fill(tmpfs, 3 * MiB)

        async def go() -> tuple[int, str]:
            async with await core_connect(f"tcp://127.0.0.1:{b.port}", user="guest", password="guest") as conn:
                session = await conn.session()
                producer = session.producer("queue://core.full")
                confirmed = 0
                try:
                    for n in range(100_000):
                        await producer.send(body(n).encode(), durable=True, wait=True)
                        confirmed += 1
                except ClientError as e:
                    return confirmed, str(e)
            return confirmed, ""

        confirmed, error = asyncio.run(asyncio.wait_for(go(), 120))
        assert confirmed > 0 and ("No space left" in error or "Errno 28" in error), error
    finally:
        b.kill9()


def test_a_core_large_message_on_a_full_disk_is_refused_cleanly(tmp_path, tmpfs):
    """A large body whose file cannot be written: the client hears [Errno 28], the broker logs
    one line (no traceback), keeps no partial file, and takes large messages again once there
    is room."""
    from petrel.client import ClientError, connect as core_connect

    b = make_broker(tmp_path, tmpfs, "max_disk_usage = 100\nmin_large_message_size = 65536\n")
    b.start()
    try:
        wait_for(lambda: health(b)[0] == 200, 60)
        filler = fill(tmpfs, 2 * MiB)
        big = b"L" * (8 * MiB)

        async def send_large() -> str:
            async with await core_connect(f"tcp://127.0.0.1:{b.port}", user="guest", password="guest") as conn:
                session = await conn.session()
                producer = session.producer("queue://core.large")
                try:
                    await producer.send(big, durable=True, wait=True)
                except ClientError as e:
                    return str(e)
            return ""

        error = asyncio.run(asyncio.wait_for(send_large(), 120))
        assert "No space left" in error or "Errno 28" in error, error
        log = b.log_path.read_text(errors="replace")
        assert "cannot store a large message body" in log, log[-3000:]
        assert "internal error handling a CORE frame" not in log, log[-3000:]
        large_dir = b.data_dir / "large-messages"
        assert not [p for p in large_dir.glob("*") if p.is_file()], "a partial body file was left behind"

        filler.unlink()
        wait_for(lambda: health(b)[0] == 200, 60)
        assert asyncio.run(asyncio.wait_for(send_large(), 120)) == ""
    finally:
        b.kill9()
