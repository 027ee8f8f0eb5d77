"""XA through ActiveMQ Classic's JMS client (`ActiveMQXAConnectionFactory`, `XASession.getXAResource()`),
driven as a transaction manager drives it (tests/interop/JmsXa.java): one branch takes messages
from `in` and sends to `out`, then two-phase commit, one-phase commit, rollback (prepared or
not); a branch prepared before a kill -9 of the broker is still prepared after it (its sends
invisible, what it took held), `recover()` on a new connection lists it, and its commit or
rollback from there finishes it: the sends appear exactly once, or the taken messages come back."""

from __future__ import annotations

import pytest

from jms import compile_program, jms_broker, petrel_only, run  # noqa: F401 (a fixture)
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system

N = 10  # messages in `in`
K = 4  # of them taken by the branch, which sends as many


@pytest.fixture
def classpath(tmp_path):
    return compile_program("JmsXa", tmp_path / "classes")


def step(classpath: str, port: int, *args: str) -> list[str]:
    what, rest = args[0], args[1:]
    return run(classpath, "JmsXa", what, f"tcp://127.0.0.1:{port}", *rest)


def drained(classpath: str, port: int, queue: str) -> list[str]:
    (line,) = [x for x in step(classpath, port, "drain", queue) if x.startswith("DRAINED")]
    count, *texts = line.split()[1:]
    assert int(count) == len(texts)
    return sorted(texts)


def took(lines: list[str]) -> list[str]:
    (line,) = [x for x in lines if x.startswith("TOOK")]
    return line.split()[1:]


def ins(numbers, redelivered=()) -> list[str]:
    return sorted(f"in-{i}" + ("*" if i in redelivered else "") for i in numbers)


def outs(gtrid: str) -> list[str]:
    return sorted(f"out-{gtrid}-{i}" for i in range(K))


@pytest.mark.parametrize("how", ["commit2", "commit1"])
def test_a_branch_commits_its_sends_and_acks(tmp_path, classpath, jms_broker, how):
    port = jms_broker.port
    assert step(classpath, port, "fill", f"xa.in.{how}", str(N)) == [f"FILLED {N}"]
    lines = step(classpath, port, "branch", f"xa.in.{how}", f"xa.out.{how}", str(K), how, how)
    assert took(lines) == [f"in-{i}" for i in range(K)]
    assert lines[-1] == f"DONE {how}" and ("VOTE XA_OK" in lines) == (how == "commit2")
    assert drained(classpath, port, f"xa.out.{how}") == outs(how)
    assert drained(classpath, port, f"xa.in.{how}") == ins(range(K, N))


@pytest.mark.parametrize("how", ["rollback2", "rollback1"])
def test_a_rolled_back_branch_sends_nothing_and_its_messages_come_back(tmp_path, classpath, jms_broker, how):
    port = jms_broker.port
    step(classpath, port, "fill", f"xa.in.{how}", str(N))
    lines = step(classpath, port, "branch", f"xa.in.{how}", f"xa.out.{how}", str(K), how, how)
    assert lines[-1] == f"DONE {how}" and ("VOTE XA_OK" in lines) == (how == "rollback2")
    assert drained(classpath, port, f"xa.out.{how}") == []
    got = drained(classpath, port, f"xa.in.{how}")
    assert [t.rstrip("*") for t in got] == ins(range(N))  # every one there, once


def test_recover_lists_a_prepared_branch_and_a_new_connection_rolls_it_back(tmp_path, classpath, jms_broker):
    port = jms_broker.port
    step(classpath, port, "fill", "xa.in.r", str(N))
    lines = step(classpath, port, "branch", "xa.in.r", "xa.out.r", str(K), "g-r", "prepare")
    assert "VOTE XA_OK" in lines and lines[-1] == "DONE prepare"
    assert "RECOVERED g-r" in step(classpath, port, "recover", "g-r", "none")
    assert drained(classpath, port, "xa.out.r") == []  # invisible while prepared
    assert drained(classpath, port, "xa.in.r") == ins(range(K, N))  # the taken ones are held
    lines = step(classpath, port, "recover", "g-r", "rollback")
    assert lines == ["RECOVERED g-r", "ROLLED BACK g-r"]
    assert step(classpath, port, "recover", "g-r", "none") == ["RECOVERED"]
    assert drained(classpath, port, "xa.out.r") == []
    assert drained(classpath, port, "xa.in.r") == ins(range(K), redelivered=range(K))


@petrel_only  # (kill -9 of the broker)
@pytest.mark.parametrize("how", ["commit", "rollback"])
def test_a_prepared_branch_survives_kill9_and_is_finished_from_a_new_connection(tmp_path, classpath, how):
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        port = broker.port
        step(classpath, port, "fill", "xa.in", str(N))
        lines = step(classpath, port, "branch", "xa.in", "xa.out", str(K), "g-1", "prepare")
        assert "VOTE XA_OK" in lines
        broker.kill9()
        broker.start()
        port = broker.port
        assert step(classpath, port, "recover", "g-1", "none") == ["RECOVERED g-1"]
        assert drained(classpath, port, "xa.out") == []
        assert drained(classpath, port, "xa.in") == ins(range(K, N))
        broker.kill9()  # twice: still prepared
        broker.start()
        port = broker.port
        lines = step(classpath, port, "recover", "g-1", how)
        assert lines == ["RECOVERED g-1", "COMMITTED g-1" if how == "commit" else "ROLLED BACK g-1"]
        if how == "commit":
            assert drained(classpath, port, "xa.out") == outs("g-1")  # exactly once
            assert drained(classpath, port, "xa.in") == []
        else:
            assert drained(classpath, port, "xa.out") == []
            assert drained(classpath, port, "xa.in") == ins(range(K), redelivered=range(K))
        broker.kill9()  # and the outcome is durable
        broker.start()
        port = broker.port
        assert step(classpath, port, "recover", "g-1", "none") == ["RECOVERED"]
        assert drained(classpath, port, "xa.out") == [] and drained(classpath, port, "xa.in") == []
        assert step(classpath, port, "recover", "g-1", "commit-unknown")[-1] == "XAEXCEPTION"
    finally:
        broker.stop()
