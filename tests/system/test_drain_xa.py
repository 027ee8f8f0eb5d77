"""Scale-down and `petrel drain` of a broker holding a prepared XA branch (ActiveMQ Classic's JMS
XA client, tests/interop/JmsXa.java): the branch took K messages from `xa.in` and sent K to
`xa.out`, then voted XA_OK. A prepared branch is a promise to the transaction manager: its
commit must still deliver the sends exactly once, its rollback give the taken messages back.
Prepared branches do not move, so the drainer and the scale-down refuse (non-zero, nothing
moved, the data kept, the xids named) until they are finished; then they move everything.
Before this, the drain exited 0 with the sends lost and the taken messages moved as new."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jms import compile_program, petrel_only
from petrel.testing.process import BrokerProcess

from test_openwire_xa import K, N, drained, ins, outs, step

pytestmark = [pytest.mark.system, petrel_only]


@pytest.fixture
def classpath(tmp_path):
    return compile_program("JmsXa", tmp_path / "classes")


@pytest.fixture
def brokers(tmp_path):
    made: list[BrokerProcess] = []

    def make(name: str, settings: str = "") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, name=name, settings=settings)
        made.append(b)
        return b

    yield make
    for b in made:
        if b.proc is not None and b.proc.poll() is None:
            b.kill9()


def drainer(source: BrokerProcess, target: BrokerProcess) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "petrel", "drain", "--data-dir", str(source.data_dir),
                           "--target", f"tcp://127.0.0.1:{target.port}", "--progress", "json"],
                          capture_output=True, text=True, timeout=120)


def prepare_branch(classpath: str, port: int, gtrid: str) -> None:
    assert step(classpath, port, "fill", "xa.in", str(N)) == [f"FILLED {N}"]
    lines = step(classpath, port, "branch", "xa.in", "xa.out", str(K), gtrid, "prepare")
    assert "VOTE XA_OK" in lines and lines[-1] == "DONE prepare"


def test_drain_refuses_a_directory_with_a_prepared_branch_until_it_is_committed(brokers, classpath):
    src, dst = brokers("src"), brokers("dst")
    src.start()
    dst.start()
    prepare_branch(classpath, src.port, "g-d")
    src.kill9()  # orphaned with the branch prepared
    done = drainer(src, dst)
    assert done.returncode == 1, done.stderr
    assert "1 prepared transaction branch" in done.stderr and "'g-d'" in done.stderr, done.stderr
    assert "commit or roll them back" in done.stderr
    assert drained(classpath, dst.port, "xa.in") == [] and drained(classpath, dst.port, "xa.out") == []
    assert step(classpath, dst.port, "recover", "g-d", "none") == ["RECOVERED"]

    src.start()  # the data was kept: the branch is still prepared there, and the TM commits it
    assert step(classpath, src.port, "recover", "g-d", "commit") == ["RECOVERED g-d", "COMMITTED g-d"]
    src.kill9()
    done = drainer(src, dst)
    assert done.returncode == 0, done.stderr
    assert drained(classpath, dst.port, "xa.out") == outs("g-d")  # the sends exactly once
    assert drained(classpath, dst.port, "xa.in") == ins(range(K, N))  # the taken ones gone


def test_scale_down_on_stop_refuses_with_a_prepared_branch_and_keeps_it(brokers, classpath):
    dst = brokers("dst")
    dst.start()
    src = brokers("src", f'[ha_policy]\nlive_only = true\n'
                         f'scale_down = {{ enabled = true, connectors = ["tcp://127.0.0.1:{dst.port}"] }}\n')
    src.start()
    prepare_branch(classpath, src.port, "g-s")
    assert src.stop() == 1, src.log()
    assert "scale_down.prepared_left" in src.log() and "'g-s'" in src.log()
    assert "scale_down.begin" not in src.log()  # its clients were not sent to the target either
    assert drained(classpath, dst.port, "xa.in") == [] and drained(classpath, dst.port, "xa.out") == []

    src.start()  # still prepared: the TM rolls it back, then the scale-down moves everything
    assert step(classpath, src.port, "recover", "g-s", "rollback") == ["RECOVERED g-s", "ROLLED BACK g-s"]
    assert src.stop() == 0, src.log()
    assert drained(classpath, dst.port, "xa.out") == []
    got = drained(classpath, dst.port, "xa.in")
    assert [t.rstrip("*") for t in got] == ins(range(N))  # every one, once
