"""A journal damaged before its tail stops the broker with file and offset; --skip-damaged starts it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import connect

pytestmark = pytest.mark.system


def test_damage_in_the_middle_stops_start_unless_skipped(broker):
    conn, listener = connect(broker)
    for i in range(50):
        conn.send("/queue/dmg", f"message-{i:03d}-" + "p" * 200, headers={"persistent": "true", "receipt": str(i)})
    for _ in range(50):
        listener.receipts.get(timeout=10)
    conn.disconnect()
    assert broker.stop() == 0
    segments = sorted((broker.data_dir / "journal").glob("*.pj"))
    target = None
    for seg in segments:
        data = bytearray(seg.read_bytes())
        pos = data.find(b"message-010-")
        if pos >= 0:
            data[pos + 3] ^= 0x20  # flip a bit in a record followed by valid ones
            seg.write_bytes(bytes(data))
            target = seg
            break
    assert target is not None
    proc = subprocess.run([sys.executable, "-m", "petrel", "run", "--config", str(broker.config_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert target.name in proc.stderr and "offset" in proc.stderr, proc.stderr
    broker.start("--skip-damaged")
    conn, listener = connect(broker)
    conn.subscribe("/queue/dmg", id="1")
    got = [f.body[:11] for f in listener.drain(idle=1.0)]
    assert "message-010" not in got
    assert len(got) == 49
    conn.disconnect()
