"""Scale-down and `petrel drain` of a broker holding a prepared XA branch (ActiveMQ Classic's JMS
XA client, tests/interop/JmsXa.java): the branch took K messages from `xa.in` and sent K to
`xa.out`, then voted XA_OK. A prepared branch is a promise to the transaction manager: its
commit must still deliver the sends exactly once, its rollback give the taken messages back.
Prepared branches do not move, so the drainer and the scale-down refuse (non-zero, nothing
moved, the data kept, the xids named) until they are finished; then they move everything.
Before this, the drain exited 0 with the sends lost and the taken messages moved as new."""

from __future__ import annotations

import pytest

from jms import petrel_only
from test_drain import drainer
from test_openwire_xa import K, N, classpath, drained, ins, outs, step  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.system, petrel_only]


def prepare_branch(classpath: str, port: int, gtrid: str) -> None:
    assert step(classpath, port, "fill", "xa.in", str(N)) == [f"FILLED {N}"]
    lines = step(classpath, port, "branch", "xa.in", "xa.out", str(K), gtrid, "prepare")
    assert "VOTE XA_OK" in lines and lines[-1] == "DONE prepare"


def test_drain_refuses_a_directory_with_a_prepared_branch_until_it_is_committed(broker_factory, classpath):
    src, dst = broker_factory(name="src"), broker_factory(name="dst")
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


def test_scale_down_on_stop_refuses_with_a_prepared_branch_and_keeps_it(broker_factory, classpath):
    dst = broker_factory(name="dst")
    dst.start()
    src = broker_factory(f'[ha_policy]\nlive_only = true\n'
                         f'scale_down = {{ enabled = true, connectors = ["tcp://127.0.0.1:{dst.port}"] }}\n',
                         name="src")
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
