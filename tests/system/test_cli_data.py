"""`petrel data print` on the data directory of a real broker that was stopped."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import connect

pytestmark = pytest.mark.system


def test_data_print_shows_queues_and_counts(broker):
    conn, listener = connect(broker)
    for i in range(7):
        conn.send("/queue/audit.orders", f"m{i}", headers={"persistent": "true", "receipt": str(i)})
    for _ in range(7):
        listener.receipts.get(timeout=10)
    conn.disconnect()
    assert broker.stop() == 0
    out = subprocess.run([sys.executable, "-m", "petrel", "data", "print", str(broker.data_dir)],
                         capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": ""})
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stdout.splitlines() if "audit.orders" in l)
    assert line.split("│")[-2].strip() == "7", line
    assert "MESSAGE" in out.stdout
    records = subprocess.run([sys.executable, "-m", "petrel", "data", "print", str(broker.data_dir), "--records"],
                             capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": ""})
    assert records.returncode == 0 and "ADD" in records.stdout


def test_data_print_on_a_directory_without_journal_fails_clearly(tmp_path):
    out = subprocess.run([sys.executable, "-m", "petrel", "data", "print", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "no journal" in out.stderr
